"""Where in the evidence a checked claim matched: character spans for display.

The verifier decides on normalized tokens and keeps no offsets (it need not);
a reader of one row wants to see the words it matched. ``claim_spans``
re-derives them from the same rules, on the same tokens, after the fact:

* quote mode: the layer ``match_quote`` reports, located in its block (the raw
  substring for ``exact``, the token run for ``normalized``, the best window
  for ``fuzzy``);
* pointer mode: every run of ``ANCHOR_RUN`` tokens holding a content token
  that the claim shares with a cited block (what anchors it), merged;
* JSON mode: the warrant's token run in a cited block.

When none of these exists (an unanchored or unverified claim), the claim's
content tokens found in its cited blocks are returned as ``shared`` spans, so
the reader sees what little the claim and its evidence have in common.

Offsets index ``Evidence.text``. Tokens are mapped back to the raw word they
came from (``word_tokens``); normalization never crosses whitespace, so this
reproduces ``tokens(text)`` token for token (a test checks it on the corpus).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from qfarm.common.grounding.verify.checks import ANCHOR_RUN
from qfarm.common.grounding.verify.quote import match_quote
from qfarm.common.grounding.verify.text import STOP_WORDS, tokens
from qfarm.common.models import Claim, Evidence
from qfarm.common.vocab import Mode

_WORD_RE = re.compile(r"\S+")
_INNER_RE = re.compile(r"\w(?:\S*\w)?")


@dataclass(frozen=True)
class Span:
    evidence_id: str
    start: int
    end: int
    how: str  # exact / normalized / fuzzy / anchor / warrant, or "shared" (content words only)


@dataclass(frozen=True)
class Token:
    text: str  # normalized, as ``tokens`` yields it
    start: int
    end: int


def word_tokens(text: str) -> list[Token]:
    """``tokens(text)``, each with the character span of the raw word it came from."""
    out: list[Token] = []
    for word in _WORD_RE.finditer(text):
        toks = tokens(word.group())
        if not toks:
            continue
        inner = _INNER_RE.search(word.group())
        start, end = word.span()
        if inner is not None:  # trim the word's edge punctuation, as the tokenizer does
            start, end = start + inner.start(), start + inner.end()
        out.extend(Token(t, start, end) for t in toks)
    return out


def _find_run(block: Sequence[Token], run: Sequence[str]) -> tuple[int, int] | None:
    """Token positions ``[i, j)`` of the first occurrence of ``run`` in ``block``."""
    n = len(run)
    if not n:
        return None
    for i in range(len(block) - n + 1):
        if all(block[i + k].text == run[k] for k in range(n)):
            return i, i + n
    return None


def _best_window(block: Sequence[Token], run: Sequence[str]) -> tuple[int, int] | None:
    """The window of ``len(run)`` block tokens sharing most tokens (as a multiset) with ``run``."""
    width = min(len(run), len(block))
    if not width:
        return None
    need = Counter(run)
    best, best_i = -1, 0
    for i in range(len(block) - width + 1):
        have = Counter(t.text for t in block[i : i + width])
        overlap = sum(min(c, need[t]) for t, c in have.items())
        if overlap > best:
            best, best_i = overlap, i
    return best_i, best_i + width


def _span(ev: Evidence, block: Sequence[Token], ij: tuple[int, int], how: str) -> Span:
    i, j = ij
    return Span(ev.id, block[i].start, block[j - 1].end, how)


def _quote_spans(claim: Claim, blocks: Mapping[str, Evidence]) -> list[Span]:
    cited = [blocks[i] for i in claim.evidence_ids if i in blocks]
    layer, where = match_quote(claim.text, cited or list(blocks.values()))
    if layer is None or where is None:
        return []
    ev = blocks[where]
    raw = claim.text.strip()
    if layer == "exact":
        at = ev.text.find(raw)
        return [Span(ev.id, at, at + len(raw), layer)]
    block, qt = word_tokens(ev.text), tokens(claim.text)
    ij = _find_run(block, qt) if layer == "normalized" else _best_window(block, qt)
    return [_span(ev, block, ij, layer)] if ij else []


def _anchor_spans(claim: Claim, cited: Sequence[Evidence]) -> list[Span]:
    toks = tokens(claim.text)
    grams = {
        gram
        for gram in zip(*(toks[i:] for i in range(ANCHOR_RUN)), strict=False)
        if any(t not in STOP_WORDS for t in gram)
    }
    spans: list[Span] = []
    for ev in cited:
        block = word_tokens(ev.text)
        hits = [
            i for i in range(len(block) - ANCHOR_RUN + 1)
            if tuple(t.text for t in block[i : i + ANCHOR_RUN]) in grams
        ]
        runs: list[list[int]] = []
        for i in hits:  # merge overlapping or touching windows into one span
            if runs and i <= runs[-1][1]:
                runs[-1][1] = i + ANCHOR_RUN
            else:
                runs.append([i, i + ANCHOR_RUN])
        spans += [_span(ev, block, (i, j), "anchor") for i, j in runs]
    return spans


def _warrant_spans(claim: Claim, cited: Sequence[Evidence]) -> list[Span]:
    wt = tokens(claim.warrant or "")
    for ev in cited:
        block = word_tokens(ev.text)
        ij = _find_run(block, wt)
        if ij:
            return [_span(ev, block, ij, "warrant")]
    return []


def _shared_spans(claim: Claim, cited: Sequence[Evidence]) -> list[Span]:
    content = {t for t in tokens(claim.text) if t not in STOP_WORDS}
    return [
        Span(ev.id, t.start, t.end, "shared")
        for ev in cited
        for t in word_tokens(ev.text)
        if t.text in content
    ]


def claim_spans(claim: Claim, blocks: Mapping[str, Evidence], *, mode: Mode) -> list[Span]:
    """Spans of the evidence that ``claim`` (as the verifier returned it) matched."""
    if not claim.admitted:
        return []
    cited = [blocks[i] for i in claim.evidence_ids if i in blocks]
    if mode == Mode.QUOTE:
        spans = _quote_spans(claim, blocks)
    elif mode == Mode.CLAIM_LATTICE:
        spans = _warrant_spans(claim, cited) if claim.anchored else []
    else:
        spans = _anchor_spans(claim, cited) if claim.anchored else []
    return spans or _shared_spans(claim, cited)
