"""The question sets that ship with qfarm, by name: ``qfarm sweep smoke``, ``qfarm sets``.

The repository's ``bench/questions/`` is their one source. Building the distribution copies
its ``*.jsonl`` and ``*.txt`` into the package's ``sets/`` folder (``setup.py``), so an
installed qfarm names them without the repository; a checkout (or an editable install)
reads ``bench/questions/`` itself. Neither tree holds a second copy to drift.
"""

from __future__ import annotations

from pathlib import Path

from qfarm.common.errors import InputError

SUFFIXES = (".jsonl", ".txt")
PACKAGED = Path(__file__).resolve().parent / "sets"  # written by the build, not in the tree
CHECKOUT = Path(__file__).resolve().parents[1] / "bench" / "questions"


def sets_dir() -> Path | None:
    """Where the shipped sets are: the installed package's folder, else the checkout's."""
    return next((d for d in (PACKAGED, CHECKOUT) if d.is_dir()), None)


def shipped() -> dict[str, Path]:
    """Every shipped set by name (the file name without its suffix), sorted."""
    folder = sets_dir()
    if folder is None:
        return {}
    return {p.stem: p for p in sorted(folder.iterdir()) if p.suffix in SUFFIXES and p.is_file()}


def resolve(questions: Path) -> Path:
    """A question file as given, or the shipped set it names (``smoke``, ``general.jsonl``).

    An existing file always wins, so a file named like a set in the current directory is
    read as given. A bare name that is neither is refused here, listing the sets.
    """
    if questions.exists() or len(questions.parts) != 1:
        return questions
    sets = shipped()
    name = questions.stem if questions.suffix in SUFFIXES else questions.name
    if name in sets and (questions.suffix in ("", sets[name].suffix)):
        return sets[name]
    if questions.suffix:
        return questions  # a missing file: the question reader says so
    raise InputError(
        f"{questions}: no such question file, nor a shipped question set "
        f"({', '.join(sets) or 'none found'}; `qfarm sets` lists them)"
    )
