"""Names in a question: the titles and proper names whose words are not the question's own.

The rules: docs/grounding.md, 'Quantifier classifier' (decision 18).

"Who wrote All Quiet on the Western Front?" holds "all", but the word belongs to a
title, not to the question. Before the quantifier markers run, the classifier asks
this module where the names are, from three kinds of evidence, strongest first:

* the corpus's own titles (a ``TitleSet`` the worker builds from its index and hands
  in: this module does no I/O), matched case-insensitively, two words or more;
* quoted spans ("...", '...', curly quotes);
* capitalised spans: two or more capitalised words, with lower-case joining words
  ("of", "the", "at", ...) allowed inside. The first word of a sentence is capitalised
  by grammar, so it joins a span only when the next word and two more after it are
  capitalised ("Every Breath You Take was ...");
  a question written in title case ("Name All The Planets") gives no capitalised
  evidence at all.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Lower-case words that may stand inside a name ("All Quiet on the Western Front",
# "Everything Everywhere All at Once", "Daphne du Maurier").
JOINING_WORDS = frozenset(
    "of the a an and in on at to for by with from de du da di del della des von van der den "
    "la le les el y or is are be it its my me you your his her our their not no as".split()
)
PLACEHOLDER = "qname"
_FOLD = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
_WORD = re.compile(r"[^\W_](?:[\w'\-]*[^\W_])?")
_DOUBLE_QUOTED = re.compile(r'"([^"]{2,160})"')
_SINGLE_QUOTED = re.compile(r"(?<![\w'])'([^']{2,160}?)'(?![\w])")
_SENTENCE_END = re.compile(r"[.!?;:]\s*$")
_PARENTHETICAL = re.compile(r"\s*\([^)]*\)\s*$")
# The sentence-initial capital is grammar's: it joins a name only before this many
# more capitalised words ("Every Breath You Take was ...", not "Every Harry Potter book").
_INITIAL_JOINS_BEFORE = 3
_TITLE_CASE_MIN_WORD = 3


def fold_question(question: str) -> str:
    """NFKC, straight quotes and single spaces, case kept (capitals are evidence here)."""
    return " ".join(unicodedata.normalize("NFKC", question).translate(_FOLD).split())


def _title_key(title: str) -> tuple[str, ...]:
    folded = fold_question(_PARENTHETICAL.sub("", title)).casefold()
    return tuple(m.group(0) for m in _WORD.finditer(folded))


class TitleSet:
    """The corpus's titles of two words or more, looked up by first word.

    Built once per index by the worker (``qfarm.worker.retrieval``) and passed to
    the classifier; equal and hashed by its digest, so memoised classifications
    keyed on it stay valid for the same titles.
    """

    __slots__ = ("_by_pair", "digest", "size")

    def __init__(self, titles: Iterable[str]):
        keys = sorted({k for k in map(_title_key, titles) if len(k) >= 2})
        # By their first two words (every title here has two or more): a question's "the"
        # then meets only the titles going on with its next word, not every "the ..." title.
        by_pair: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        for key in keys:
            by_pair.setdefault((key[0], key[1]), []).append(key)
        # longest first, so "harry potter and the philosopher's stone" wins over "harry potter"
        self._by_pair = {w: tuple(sorted(v, key=len, reverse=True)) for w, v in by_pair.items()}
        self.size = len(keys)
        self.digest = hashlib.sha256("\n".join(" ".join(k) for k in keys).encode()).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TitleSet) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"TitleSet(size={self.size}, digest={self.digest})"

    def longest_at(self, words: list[str], i: int) -> int:
        """How many words from ``words[i]`` a title covers (0 when none starts there)."""
        if i + 1 >= len(words):
            return 0
        for key in self._by_pair.get((words[i], words[i + 1]), ()):
            if tuple(words[i : i + len(key)]) == key:
                return len(key)
        return 0


@dataclass(frozen=True)
class NameSpan:
    """A name in the folded question: ``text[start:end]``, and what showed it is one."""

    start: int
    end: int
    source: str  # "title", "quoted" or "capitalised"


def _is_capitalised(word: str) -> bool:
    return word[0].isupper()


def _is_title_cased(words: list[re.Match[str]]) -> bool:
    """Every longer word after the first is capitalised: capitals say nothing here."""
    longer = [w.group(0) for w in words[1:] if len(w.group(0)) >= _TITLE_CASE_MIN_WORD]
    return len(longer) >= 2 and all(_is_capitalised(w) for w in longer)


def _sentence_initial(text: str, word: re.Match[str]) -> bool:
    before = text[: word.start()]
    return not before.strip() or bool(_SENTENCE_END.search(before))


def _capitalised_spans(text: str) -> list[NameSpan]:
    words = list(_WORD.finditer(text))
    if _is_title_cased(words):
        return []
    spans: list[NameSpan] = []
    run: list[re.Match[str]] = []

    def close() -> None:
        while run and not _is_capitalised(run[-1].group(0)):
            run.pop()
        chosen = list(run)
        if chosen and _sentence_initial(text, chosen[0]):
            rest = chosen[1:]
            while rest and not _is_capitalised(rest[0].group(0)):
                rest.pop(0)
            joins = len(chosen) > 1 and _is_capitalised(chosen[1].group(0))
            if not joins or sum(_is_capitalised(w.group(0)) for w in rest) < _INITIAL_JOINS_BEFORE:
                chosen = rest
        if sum(_is_capitalised(w.group(0)) for w in chosen) >= 2:
            spans.append(NameSpan(chosen[0].start(), chosen[-1].end(), "capitalised"))
        run.clear()

    for word in words:
        w = word.group(0)
        gap = text[run[-1].end() : word.start()] if run else ""
        if run and gap.strip():
            close()
        if _is_capitalised(w) or (run and w in JOINING_WORDS):
            run.append(word)
        else:
            close()
    close()
    return spans


def _quoted_spans(text: str) -> list[NameSpan]:
    found = [NameSpan(m.start(1), m.end(1), "quoted") for m in _DOUBLE_QUOTED.finditer(text)]
    found += [NameSpan(m.start(1), m.end(1), "quoted") for m in _SINGLE_QUOTED.finditer(text)]
    return found


def _title_spans(text: str, titles: TitleSet) -> list[NameSpan]:
    matches = list(_WORD.finditer(text))
    words = [m.group(0).casefold() for m in matches]
    spans: list[NameSpan] = []
    i = 0
    while i < len(words):
        n = titles.longest_at(words, i)
        if n:
            spans.append(NameSpan(matches[i].start(), matches[i + n - 1].end(), "title"))
            i += n
        else:
            i += 1
    return spans


def find_name_spans(text: str, titles: TitleSet | None = None) -> list[NameSpan]:
    """Names in a folded question (``fold_question``), non-overlapping, in text order.

    Where two kinds of evidence overlap, the longer span wins (a corpus title inside
    a longer quoted name is part of that name).
    """
    candidates = _quoted_spans(text) + _capitalised_spans(text)
    if titles is not None:
        candidates += _title_spans(text, titles)
    chosen: list[NameSpan] = []
    for span in sorted(candidates, key=lambda s: (s.start - s.end, s.start)):
        if all(span.end <= c.start or span.start >= c.end for c in chosen):
            chosen.append(span)
    return sorted(chosen, key=lambda s: s.start)


def replace_spans(text: str, spans: Iterable[NameSpan]) -> str:
    """``text`` with each span replaced by ``PLACEHOLDER`` (a word no marker reads)."""
    out, at = [], 0
    for span in sorted(spans, key=lambda s: s.start):
        out += [text[at : span.start], PLACEHOLDER]
        at = span.end
    out.append(text[at:])
    return "".join(out)
