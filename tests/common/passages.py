"""Evidence passages for the tests of common/: one builder instead of one per file."""

from __future__ import annotations

from qfarm.common.models import Evidence


def passage(
    i: int,
    title: str,
    text: str,
    *,
    doc_id: str | None = None,
    chunk_id: str | None = None,
    score: float = 1.0,
) -> Evidence:
    """Evidence ``E{i}``: the whole of ``text``, from the document ``doc_id`` (the title
    unless given), chunk ``{doc_id}:0`` unless given."""
    doc = title if doc_id is None else doc_id
    return Evidence(
        id=f"E{i}",
        doc_id=doc,
        chunk_id=f"{doc}:0" if chunk_id is None else chunk_id,
        title=title,
        text=text,
        score=score,
        offset_start=0,
        offset_end=len(text),
    )
