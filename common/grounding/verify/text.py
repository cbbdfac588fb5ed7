"""Text normalization, tokens and stop words shared by every check.

The rules: docs/grounding.md, 'Verification'.

Normalization: Unicode NFKC, casefold, typographic quotes and dashes folded to
ASCII, whitespace collapsed. Tokens are whitespace-separated runs with
punctuation stripped at their edges (``\\w(?:\\S*\\w)?`` finds exactly that in
one regex pass), so ``"Einstein,"`` and ``Einstein`` are the same token while
``mass-energy`` stays one token.

Decisions where the rules left room:

* A possessive ``'s`` is dropped from a token (``einstein's`` → ``einstein``),
  so a claim about "Einstein's theory" matches a block titled "Albert Einstein".
  Both sides of every comparison go through the same function, so this can
  only make matches more forgiving, never inconsistent.
* Content tokens are tokens minus ``STOP_WORDS`` (below, fixed; changing it
  means bumping ``VERIFIER_VERSION``). Numbers are content tokens.
* Block analyses are cached by text (``analyze_block``): the same evidence
  blocks are verified against many answers in a sweep, and the cache is pure.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because
    been before being below between both but by can can't cannot could couldn't did didn't
    do does doesn't doing don't down during each few for from further had hadn't has hasn't
    have haven't having he he'd he'll he's her here here's hers herself him himself his how
    how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
    mustn't my myself no nor not of off on once only or other ought our ours ourselves out
    over own same shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll
    they're they've this those through to too under until up very was wasn't we we'd we'll
    we're we've were weren't what what's when when's where where's which while who who's
    whom why why's will with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves also just may might must shall upon via within without yet e.g i.e
    etc one ones many much s
    """.split()
)

_FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
        "\u00ad": None,  # soft hyphen
        "\u200b": None,  # zero-width space
        "\u200c": None,
        "\u200d": None,
        "\ufeff": None,
    }
)
_WS_RE = re.compile(r"\s+")
_TOKEN_RE = re.compile(r"\w(?:\S*\w)?")
_POSSESSIVE_RE = re.compile(r"(?<=\w)'s\b")


# Memoised (a str in, a str out): one job's answer is normalised by the reader, the
# deflection check and the sidecar, and its question by every check; about a tenth of the
# verify stage's CPU (bench/perf/worker_cpu.py).
@lru_cache(maxsize=4096)
def normalize(text: str) -> str:
    """NFKC, casefold, fold typographic quotes/dashes, collapse whitespace."""
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_FOLD)
    return _WS_RE.sub(" ", folded).strip()


def tokens(text: str) -> list[str]:
    """Normalized tokens with punctuation stripped at their edges."""
    return _TOKEN_RE.findall(_POSSESSIVE_RE.sub("", normalize(text)))


def content_tokens(text: str) -> list[str]:
    """Tokens minus stop words, in order (duplicates kept)."""
    return [t for t in tokens(text) if t not in STOP_WORDS]


def joined(toks: Sequence[str]) -> str:
    """Space-padded token string: ``f" {a} {b} "``, for word-aligned substring tests."""
    return " " + " ".join(toks) + " "


@dataclass(frozen=True)
class BlockAnalysis:
    """Everything the checks need from one evidence block, computed once."""

    tokens: tuple[str, ...]
    joined: str  # space-padded normalized tokens
    token_set: frozenset[str]
    content: frozenset[str]  # content tokens of text and title
    title_content: frozenset[str]


@lru_cache(maxsize=4096)
def analyze_block(title: str, text: str) -> BlockAnalysis:
    toks = tuple(tokens(text))
    title_content = frozenset(content_tokens(title))
    content = frozenset(t for t in toks if t not in STOP_WORDS) | title_content
    return BlockAnalysis(
        tokens=toks,
        joined=joined(toks),
        token_set=frozenset(toks),
        content=content,
        title_content=title_content,
    )


@lru_cache(maxsize=4096)
def block_ngrams(title: str, text: str, n: int) -> frozenset[tuple[str, ...]]:
    """Every run of ``n`` normalized tokens in a block (for pointer-mode anchors)."""
    toks = analyze_block(title, text).tokens
    return frozenset(zip(*(toks[i:] for i in range(n)), strict=False))
