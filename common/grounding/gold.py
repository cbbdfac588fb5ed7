"""Gold-answer matching: did the answer state a gold answer, and did retrieval find one?

Computed at verify time when the question file gives ``answers``; the row keeps
two booleans, never the answer text. Matching is on normalized token
sequences: NFKC, casefold, punctuation stripped at token edges (as the verifier
does: docs/grounding.md, 'Verification'), and the articles a/an/the dropped (as in SQuAD's answer normalization, so "The
Beatles" matches "Beatles"). Two additions for answers: dashes separate tokens
("China–Nepal" matches "China-Nepal", "mid-2061" contains "2061") and a
possessive "'s" is dropped ("Seurat's" contains "Seurat"). A gold answer
matches when its token sequence occurs contiguously in the text, so "Paris"
does not match "Parisian".
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from qfarm.common.grounding.verify.text import joined
from qfarm.common.models import Claim, Evidence

ARTICLES = frozenset({"a", "an", "the"})


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def _strip_edges(token: str) -> str:
    start, end = 0, len(token)
    while start < end and _is_punct(token[start]):
        start += 1
    while end > start and _is_punct(token[end - 1]):
        end -= 1
    return token[start:end]


# Every character of Unicode's dash punctuation category (Pd), as of Unicode 16: a table
# lookup per character instead of a category lookup in Python per character, which was
# most of the gold-answer check's cost (tests/common/grounding/test_gold.py checks the
# list against the running Python's unicodedata).
DASHES = (
    "\u002d\u058a\u05be\u1400\u1806\u2010\u2011\u2012\u2013\u2014\u2015\u2e17\u2e1a"
    "\u2e3a\u2e3b\u2e40\u2e5d\u301c\u3030\u30a0\ufe31\ufe32\ufe58\ufe63\uff0d"
    "\U00010d6e\U00010ead"
)
_DASH_TO_SPACE = str.maketrans(dict.fromkeys(DASHES, " "))


def _split_dashes(text: str) -> str:
    return text.translate(_DASH_TO_SPACE)


# Memoised: the n samples and the modes of a question check the same evidence blocks
# (twice each: gold-in-evidence here and the evidence rank in qfarm.common.retrieval.evaluation),
# which was most of the verify stage's gold-answer cost.
@lru_cache(maxsize=4096)
def normalize_tokens(text: str) -> tuple[str, ...]:
    """Tokens of ``text`` after NFKC, casefold, dash split, edge-punctuation strip and article removal."""
    # A letter or digit is never punctuation or a symbol: most words have one at each end
    # and nothing to strip, and skip the category lookups of ``_strip_edges``.
    words = _split_dashes(unicodedata.normalize("NFKC", text).casefold()).split()
    stripped = [w if w[0].isalnum() and w[-1].isalnum() else _strip_edges(w) for w in words]
    return tuple(
        token
        for token in (_without_possessive(t) if t.endswith(_POSSESSIVE) else t for t in stripped)
        if token and token not in ARTICLES
    )


_POSSESSIVE = ("'s", "\u2019s")


def _without_possessive(token: str) -> str:
    return _strip_edges(token[:-2])


def contains_answer(text_tokens: Sequence[str], answers: Iterable[Sequence[str]]) -> bool:
    haystack = joined(text_tokens)  # space-padded: matches respect token boundaries
    return any(answer and joined(answer) in haystack for answer in answers)


def match_gold(
    answers: Sequence[str], claims: Sequence[Claim], evidence: Sequence[Evidence]
) -> tuple[bool | None, bool | None]:
    """(gold in admitted claims, gold in evidence text); (None, None) when no usable answers.

    A claim's text and its warrant both count: the warrant is the part of the
    answer the model copied from the evidence. Claims that were not admitted
    (over the cap) do not count.
    """
    gold = [tokens for tokens in (normalize_tokens(a) for a in answers) if tokens]
    if not gold:
        return (None, None)
    in_claims = any(
        contains_answer(normalize_tokens(part), gold)
        for claim in claims
        if claim.admitted
        for part in (claim.text, claim.warrant or "")
    )
    in_evidence = any(contains_answer(normalize_tokens(e.text), gold) for e in evidence)
    return (in_claims, in_evidence)
