"""Every "docs/<file>.md, '<section>'" reference in the repository names a real section,
and nothing points outside the repository.

Docstrings and docs point readers at the repository's own explanations; a renamed
heading or a typo would send them nowhere, and a reference to a tracker, notes kept
elsewhere or a commit sends a reader where they cannot follow.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("common", "worker", "producer", "ops", "qfarm", "bench", "docs", "tests")
# docs/grounding.md, 'Verification' and 'Verdict and label'  |  grounding.md, 'Audit line'
REFERENCE = re.compile(r"(?:docs/)?(\w+\.md),((?:\s+(?:and\s+)?'[^']+')+)")
SECTION = re.compile(r"'([^']+)'")


def _headings(doc: Path) -> set[str]:
    """Heading text without the leading #s and without a trailing `(file)`, `(file, NAME)`."""
    out = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            out.add(title)
            out.add(re.sub(r"\s*\((?:`[^`]*`(?:,\s*)?)+\)$", "", title))
    return out


def _doc(name: str) -> Path:
    """docs/<name>, or a file at the top of the repository (CHANGELOG.md)."""
    top = ROOT / name
    return top if name == "CHANGELOG.md" and top.is_file() else ROOT / "docs" / name


def _references() -> list[tuple[str, str, str]]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"] + [
        p for top in SOURCES for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md")
    ]
    found = []
    for path in files:
        if "results" in path.parts or path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8")
        for m in REFERENCE.finditer(text):
            for section in SECTION.findall(m[2]):
                found.append((str(path.relative_to(ROOT)), m[1], section))
    return found


def test_references_exist_and_resolve() -> None:
    refs = _references()
    assert len(refs) >= 20  # the docstrings of common/ cite sections; the scan must see them
    broken = [
        f"{where}: {doc}, '{section}'"
        for where, doc, section in refs
        if not _doc(doc).is_file() or section not in _headings(_doc(doc))
    ]
    assert broken == []


# What a reader of the repository cannot follow: tracker numbers, the design notes kept
# outside it, and commit hashes. Each says what is meant in place instead (the rule, the
# measurement, the reason). The patterns are assembled so this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        (
            r"\b" + "issue" + r"s? ?#?\d",  # a tracker reference
            "SPEC" + r"(?:\.md| ?\u00a7)",  # the design notes kept outside the repository
            r"\u00a7 ?\d",  # a numbered section of them
            r"\b(?:STYLE|NOTES)\.md\b",
            r"\bthe " + "spec" + r"\b",
            r"\b[0-9a-f]{7,40}\^",  # a commit (its parent), as written in history
            r"\bcommit [0-9a-f]{7,40}\b",
        )
    ),
    re.IGNORECASE,
)
BINARY_SUFFIXES = {".png", ".gz", ".ico", ".woff", ".woff2", ".sqlite", ".db"}


def _tracked_files() -> list[Path]:
    """The repository's files: `git ls-files` in a checkout, every file otherwise."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode()
        files = [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "results", "__pycache__"}
        files = [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.parts)]
    return [p for p in files if p.suffix not in BINARY_SUFFIXES and p.is_file()]


def test_nothing_refers_outside_the_repository() -> None:
    files = _tracked_files()
    assert any(p.name == "pyproject.toml" for p in files)  # the scan sees the tree
    found = []
    for path in files:
        if path == Path(__file__):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if m := OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {m[0]!r}")
    assert found == []
