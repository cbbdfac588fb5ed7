"""Sentence-aligned chunking of corpus documents into passages (docs/retrieval.md, 'Passages').

Every backend indexes the output of ``chunk_document``, so a sweep's evidence
does not depend on which backend served it. A passage is a contiguous slice of
its source document: ``document.text[offset_start:offset_end] == passage.text``,
which lets a verifier or a reader find the quote in the original.

Rules (``CHUNKER_VERSION`` in ``common/versions.py`` names them; bump it when
they change, since the index version is built from it):

* passages hold whole sentences, packed greedily up to ``max_chars`` (800);
* a sentence longer than ``max_chars`` is cut at whitespace (hard cut only when
  a single word is longer than ``max_chars``);
* consecutive passages of one document overlap by the trailing sentences of the
  previous passage that fit in ``overlap_chars`` (160), so a fact that straddles
  a boundary is whole in at least one passage;
* a document shorter than ``max_chars`` is one passage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qfarm.common.versions import CHUNKER_VERSION

DEFAULT_MAX_CHARS = 800
DEFAULT_OVERLAP_CHARS = 160

# A sentence ends at . ! ? (plus closing quotes/brackets) followed by whitespace
# and something that can start a sentence.
_BOUNDARY = re.compile(r"""[.!?]['"”’)\]]*(?=\s+['"“‘(\[]?[A-Z0-9À-ÖØ-Þ])""")
_LAST_WORD = re.compile(r"(\S+)$")
# Words after which a full stop rarely ends a sentence ("Arthur C. Clarke",
# "St. Louis", "Dr. Who"); lowercase, without the final dot.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof gen col lt sgt capt cmdr adm gov sen rep rev fr "
    "vs no nos fig approx ca c inc ltd co corp mt ft vol ed eds pp op cf al e.g i.e".split()
)


@dataclass(frozen=True, slots=True)
class Passage:
    """One chunk of a document, with its offsets in the document's text."""

    doc_id: str
    chunk_id: str
    title: str
    text: str
    offset_start: int
    offset_end: int


def _is_abbreviation(text: str, dot_index: int) -> bool:
    match = _LAST_WORD.search(text, 0, dot_index)
    if match is None:
        return False
    word = match.group(1).lstrip("(['\"“‘").lower()
    if len(word) == 1 and word.isalpha():
        return True  # an initial: "Arthur C. Clarke"
    if "." in word:
        return True  # an initialism: "U.S.", "e.g."
    return word in _ABBREVIATIONS


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans ``(start, end)`` of ``text``, whitespace trimmed at both ends."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if _is_abbreviation(text, match.start()):
            continue
        spans.append((start, match.end()))
        start = match.end()
    spans.append((start, len(text)))
    trimmed: list[tuple[int, int]] = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            trimmed.append((s, e))
    return trimmed


def _cut_long(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """Cut an over-long sentence at whitespace into pieces of at most ``max_chars``."""
    pieces: list[tuple[int, int]] = []
    while end - start > max_chars:
        cut = text.rfind(" ", start + 1, start + max_chars + 1)
        if cut <= start:
            cut = start + max_chars  # one word longer than a passage: hard cut
            pieces.append((start, cut))
            start = cut
        else:
            piece_end = cut
            while piece_end > start and text[piece_end - 1].isspace():
                piece_end -= 1
            pieces.append((start, piece_end))
            start = cut + 1
        while start < end and text[start].isspace():
            start += 1
    if end > start:
        pieces.append((start, end))
    return pieces


def _pieces(text: str, max_chars: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in split_sentences(text):
        out.extend(_cut_long(text, s, e, max_chars) if e - s > max_chars else [(s, e)])
    return out


def _overlap_start(
    pieces: list[tuple[int, int]], first: int, nxt: int, *, overlap: int, limit: int
) -> int:
    """Index of the first piece the next passage starts at (reusing a small tail)."""
    k = nxt
    tail_end = pieces[nxt - 1][1]
    while k - 1 > first and tail_end - pieces[k - 1][0] <= overlap:
        k -= 1
    # The next passage must still fit the first new piece.
    while k < nxt and pieces[nxt][1] - pieces[k][0] > limit:
        k += 1
    return k


def chunk_spans(
    text: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    overlap_chars: int = DEFAULT_OVERLAP_CHARS,
) -> list[tuple[int, int]]:
    """Passage spans ``(start, end)`` of ``text`` under the rules in the module docstring."""
    if max_chars < 1 or overlap_chars < 0:
        raise ValueError("max_chars must be >= 1 and overlap_chars >= 0")
    pieces = _pieces(text, max_chars)
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces):
        j = i + 1
        while j < len(pieces) and pieces[j][1] - pieces[i][0] <= max_chars:
            j += 1
        spans.append((pieces[i][0], pieces[j - 1][1]))
        if j >= len(pieces):
            break
        i = _overlap_start(pieces, i, j, overlap=overlap_chars, limit=max_chars)
    return spans


def chunk_document(
    doc_id: str,
    title: str,
    text: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    overlap_chars: int = DEFAULT_OVERLAP_CHARS,
) -> list[Passage]:
    """Chunk one document; chunk ids are ``<doc_id>#<n>`` in document order."""
    return [
        Passage(doc_id, f"{doc_id}#{n}", title, text[s:e], s, e)
        for n, (s, e) in enumerate(
            chunk_spans(text, max_chars=max_chars, overlap_chars=overlap_chars)
        )
    ]


__all__ = [
    "CHUNKER_VERSION",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_OVERLAP_CHARS",
    "Passage",
    "chunk_document",
    "chunk_spans",
    "split_sentences",
]
