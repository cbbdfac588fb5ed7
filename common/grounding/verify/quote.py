"""Quote-mode layered matching: exact, normalized, fuzzy (docs/grounding.md, 'Verification').

Layers, tried in order over the candidate blocks (the cited ones, or every
block when the quote cites none):

1. ``exact``: the quote (edge punctuation and ellipses trimmed) is a raw
   substring of the block text;
2. ``normalized``: its normalized tokens are a word-aligned substring of the
   block's normalized tokens (case, Unicode form, typographic quotes, spacing
   and edge punctuation forgiven);
3. ``fuzzy``: at least ``FUZZY_MIN_SHARE`` of the quote's tokens occur (as a
   multiset) in one contiguous window of the block's tokens as long as the
   quote (the whole block when it is shorter).

Exact and normalized matches anchor the quote (it is verbatim); a fuzzy match
verifies it without anchoring.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from qfarm.common.grounding.verify.text import analyze_block, joined, tokens
from qfarm.common.models import Evidence

FUZZY_MIN_SHARE = 0.8
LAYERS: tuple[str, ...] = ("exact", "normalized", "fuzzy")
MIN_QUOTE_TOKENS = 3


def best_window_overlap(quote_tokens: Sequence[str], block_tokens: Sequence[str]) -> int:
    """Max multiset overlap between the quote and any window of its length in the block."""
    need = Counter(quote_tokens)
    width = min(len(quote_tokens), len(block_tokens))
    have: Counter[str] = Counter()
    overlap = best = 0
    for i, tok in enumerate(block_tokens):
        if have[tok] < need.get(tok, 0):
            overlap += 1
        have[tok] += 1
        if i >= width:
            old = block_tokens[i - width]
            have[old] -= 1
            if have[old] < need.get(old, 0):
                overlap -= 1
        if overlap > best:
            best = overlap
            if best == len(quote_tokens):
                break
    return best


def match_quote(quote: str, blocks: Sequence[Evidence]) -> tuple[str | None, str | None]:
    """``(layer, evidence id)`` of the first layer that matches, else ``(None, None)``."""
    raw = quote.strip()
    if raw:
        for ev in blocks:
            if raw in ev.text:
                return "exact", ev.id
    qt = tokens(quote)
    if not qt:
        return None, None
    qj = joined(qt)
    analyses = [(ev, analyze_block(ev.title, ev.text)) for ev in blocks]
    for ev, block in analyses:
        if qj in block.joined:
            return "normalized", ev.id
    need = math.ceil(FUZZY_MIN_SHARE * len(qt))
    for ev, block in analyses:
        # cheap pre-filter: enough of the quote's tokens must occur in the block at all
        if sum(1 for t in qt if t in block.token_set) < need:
            continue
        if best_window_overlap(qt, block.tokens) >= need:
            return "fuzzy", ev.id
    return None, None
