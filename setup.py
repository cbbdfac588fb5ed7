"""The build step pyproject.toml cannot declare: ship the question sets as package data.

``bench/questions/`` is the repository's one copy of the question sets; the build copies
its ``*.jsonl`` and ``*.txt`` into the built package's ``qfarm/sets/`` folder, which
``qfarm/question_sets.py`` reads in an installed qfarm (``qfarm sets``, ``qfarm sweep
smoke``). Nothing is copied into the source tree, so the two cannot drift.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent / "bench" / "questions"
SUFFIXES = (".jsonl", ".txt")


class BuildWithQuestionSets(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "qfarm" / "sets"
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(SOURCE.iterdir()):
            if path.suffix in SUFFIXES:
                shutil.copyfile(path, target / path.name)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        target = Path(self.build_lib) / "qfarm" / "sets"
        sets = [str(target / p.name) for p in sorted(SOURCE.iterdir()) if p.suffix in SUFFIXES]
        return [*super().get_outputs(include_bytecode), *sets]


setup(cmdclass={"build_py": BuildWithQuestionSets})
