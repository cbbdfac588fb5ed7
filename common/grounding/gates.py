"""Literal gates: run a regular expression only when a word it must match is in the text.

The quantifier classifier and the denial grammar try over a hundred patterns on every
question or answer, and nearly all of them fail; most of that time goes to patterns
whose own words are not in the text at all. A pattern's *gate* is a set of literal
strings at least one of which every match of it contains (``"every"`` for the
universal "every", ``{"list", "name", "enumerate", "cite"}`` for "list all ..."): when
none of them occurs in the text the pattern cannot match, and is skipped.

The gates are read off the patterns themselves (their parse tree, the standard
library's ``re._parser``), not written beside them, so a pattern changed or added is
gated correctly without a second list to keep in step. The reading is sound by
construction: it takes only characters a match must hold in that order (literal runs
of a mandatory sequence, the union over the branches of an alternation, the body of a
repeat taken at least once), never what a lookaround or an optional part holds. A
pattern it cannot read (a flag that changes case, an unknown node) gets no gate and
always runs. ``tests/common/grounding/test_gates.py`` checks every shipped pattern's
gate on the shipped question sets and the patterns' own examples.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

try:  # the parser behind re.compile (named sre_parse before Python 3.11)
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - another interpreter: every pattern runs
    _sre_parse = None
    _c = None

# A set of literal strings one of which every match contains; None: no such set known.
Gate = frozenset[str] | None
# Stands in a gate for "a decimal digit" (``\d``: any script's digits), which no list of
# literals could spell; no pattern's literal holds a NUL.
DIGIT = "\x00digit"
_DIGIT_RE = re.compile(r"\d")


def gate_of(pattern: re.Pattern[str]) -> Gate:
    """The pattern's gate (None: it must always run)."""
    if _sre_parse is None or pattern.flags & re.IGNORECASE or not isinstance(pattern.pattern, str):
        return None
    try:
        tree = _sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # the parser is private: any surprise means no gate, never a wrong one
        return None
    try:
        return _sequence(list(tree))
    except Exception:
        return None


def _sequence(items: Sequence[tuple[Any, Any]]) -> Gate:
    """The most selective gate of a sequence of nodes, all of which a match goes through."""
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op == _c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        found = _node(op, av)
        if found:
            candidates.append(found)
    flush()
    if not candidates:
        return None
    # The longest shortest word fails most often on text that lacks it; then the fewest words.
    return max(candidates, key=lambda c: (min(_strength(s) for s in c), -len(c)))


def _strength(word: str) -> int:
    # A digit is about as rare in a question as a word of three letters.
    return 3 if word == DIGIT else len(word)


def _node(op: Any, av: Any) -> Gate:
    """The gate of one node of a sequence (None: it guarantees no literal)."""
    if op == _c.SUBPATTERN:
        _group, add_flags, _del_flags, body = av
        if add_flags & re.IGNORECASE:
            return None
        return _sequence(list(body))
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
        low, _high, body = av
        return _sequence(list(body)) if low >= 1 else None
    if op == getattr(_c, "ATOMIC_GROUP", None):
        return _sequence(list(av))
    if op == _c.BRANCH:
        _none, branches = av
        union: set[str] = set()
        for branch in branches:
            gate = _sequence(list(branch))
            if gate is None:
                return None
            union |= gate
        return frozenset(union)
    if op == _c.IN and list(av) == [(_c.CATEGORY, _c.CATEGORY_DIGIT)]:
        return frozenset({DIGIT})
    # Anything else (another class, a lookaround, an anchor, a back-reference) holds no
    # literal a match is sure to contain, as far as this reading goes.
    return None


class GatedPatterns:
    """Patterns with their gates: ``candidates(text)`` are the indexes of those that may
    match ``text``, in their order (a pattern without a gate is always one)."""

    def __init__(self, patterns: Iterable[re.Pattern[str]]):
        self.patterns: tuple[re.Pattern[str], ...] = tuple(patterns)
        self.gates: tuple[Gate, ...] = tuple(gate_of(p) for p in self.patterns)
        self._always = frozenset(i for i, gate in enumerate(self.gates) if gate is None)
        users: dict[str, list[int]] = {}
        for i, gate in enumerate(self.gates):
            for word in gate or ():
                users.setdefault(word, []).append(i)
        self._digit_users = tuple(users.pop(DIGIT, ()))
        # Each word with the patterns it opens: one substring test a word, not one a pattern.
        self._users = tuple((word, tuple(ids)) for word, ids in sorted(users.items()))

    def candidates(self, text: str) -> list[int]:
        found = set(self._always)
        for word, ids in self._users:
            if word in text:
                found.update(ids)
        if self._digit_users and _DIGIT_RE.search(text):
            found.update(self._digit_users)
        return sorted(found)


__all__ = ["DIGIT", "Gate", "GatedPatterns", "gate_of"]
