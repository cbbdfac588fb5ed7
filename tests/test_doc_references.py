"""Every "docs/<file>.md, '<section>'" reference in the repository names a real section.

Docstrings and docs point readers at the repository's own explanations; a renamed
heading or a typo would send them nowhere.
"""

from __future__ import annotations

import re
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


def _references() -> list[tuple[str, str, str]]:
    files = [ROOT / "README.md"] + [
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
        if not (ROOT / "docs" / doc).is_file() or section not in _headings(ROOT / "docs" / doc)
    ]
    assert broken == []
