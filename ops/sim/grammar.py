"""GBNF grammars as the simulator reads them: parse (a bad one is vLLM's 400), match, sample.

The part of llama.cpp's GBNF notation that vLLM's grammar backend also reads: rules
``name ::= ...``, string literals with ``\\n \\t \\r \\" \\\\ \\xHH \\uHHHH``
escapes, character classes (``[a-z]``, ``[^"\\n]``), ``.``, groups, ``|``, and the
repetitions ``*``, ``+``, ``?``, ``{m}``, ``{m,}``, ``{m,n}``; ``#`` comments.

The simulator has no tokens to mask, so it writes an answer first and checks it
against the grammar (``Grammar.matches``); ``Grammar.shortest`` is the conforming
text of last resort. Matching is a memoised set of end positions per (node,
position): linear enough for the farm's answers of a few hundred characters.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

Node = tuple  # ("lit", s) ("cls", negated, ranges) ("any",) ("ref", name)
#              ("seq", nodes) ("alt", nodes) ("rep", node, lo, hi|None)

_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
_RULE_START_RE = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*::=", re.M)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "[": "[", "]": "]",
            "-": "-", "^": "^", "/": "/"}  # fmt: skip
MAX_REPEAT = 10_000


class GrammarError(ValueError):
    """The text is not a grammar this reader (and vLLM's backend) would accept."""


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def error(self, what: str) -> GrammarError:
        line = self.s.count("\n", 0, self.i) + 1
        return GrammarError(f"{what} (line {line})")

    def skip(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            else:
                return

    def char(self) -> str:
        """One character of a literal or class, escapes decoded."""
        c = self.s[self.i]
        self.i += 1
        if c != "\\":
            return c
        if self.i >= len(self.s):
            raise self.error("a backslash at the end")
        e = self.s[self.i]
        self.i += 1
        if e in _ESCAPES:
            return _ESCAPES[e]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is None:
            raise self.error(f"unknown escape \\{e}")
        digits = self.s[self.i : self.i + width]
        if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise self.error(f"bad \\{e} escape")
        self.i += width
        return chr(int(digits, 16))

    def literal(self) -> Node:
        self.i += 1
        out: list[str] = []
        while True:
            if self.i >= len(self.s) or self.s[self.i] == "\n":
                raise self.error("an unterminated string literal")
            if self.s[self.i] == '"':
                self.i += 1
                return ("lit", "".join(out))
            out.append(self.char())

    def char_class(self) -> Node:
        self.i += 1
        negated = self.s.startswith("^", self.i)
        self.i += negated
        ranges: list[tuple[str, str]] = []
        while True:
            if self.i >= len(self.s):
                raise self.error("an unterminated character class")
            if self.s[self.i] == "]":
                self.i += 1
                return ("cls", negated, tuple(ranges))
            lo = self.char()
            hi = lo
            if self.s.startswith("-", self.i) and not self.s.startswith("-]", self.i):
                self.i += 1
                hi = self.char()
            ranges.append((lo, hi))

    def repeat(self, node: Node) -> Node:
        c = self.s[self.i] if self.i < len(self.s) else ""
        if c and c in "*+?":
            self.i += 1
            return ("rep", node, 1 if c == "+" else 0, 1 if c == "?" else None)
        if c != "{":
            return node
        m = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}").match(self.s, self.i)
        if m is None:
            raise self.error("a bad {m,n} repetition")
        self.i = m.end()
        lo = int(m[1])
        hi = lo if m[2] is None else (int(m[3]) if m[3] else None)
        if (hi is not None and hi < lo) or lo > MAX_REPEAT or (hi or 0) > MAX_REPEAT:
            raise self.error("a bad {m,n} repetition")
        return ("rep", node, lo, hi)

    def sequence(self, nested: bool) -> Node:
        items: list[Node] = []
        while True:
            self.skip(newlines=nested)
            if self.i >= len(self.s):
                break
            c = self.s[self.i]
            if c == '"':
                item = self.literal()
            elif c == "[":
                item = self.char_class()
            elif c == ".":
                self.i += 1
                item = ("any",)
            elif c == "(":
                self.i += 1
                item = self.alternatives(nested=True)
                self.skip(newlines=True)
                if not self.s.startswith(")", self.i):
                    raise self.error("an unclosed group")
                self.i += 1
            elif (m := _NAME_RE.match(self.s, self.i)) is not None:
                if not nested and _RULE_START_RE.match(self.s, self.i):
                    break  # the next rule begins
                self.i = m.end()
                item = ("ref", m[0])
            else:
                break
            items.append(self.repeat(item))
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def alternatives(self, nested: bool) -> Node:
        alts = [self.sequence(nested)]
        while True:
            self.skip(newlines=nested)
            if not self.s.startswith("|", self.i):
                break
            self.i += 1
            alts.append(self.sequence(nested))
        return alts[0] if len(alts) == 1 else ("alt", tuple(alts))

    def rules(self) -> dict[str, Node]:
        rules: dict[str, Node] = {}
        while True:
            self.skip(newlines=True)
            if self.i >= len(self.s):
                return rules
            m = _RULE_START_RE.match(self.s, self.i)
            if m is None:
                raise self.error("expected a rule `name ::= ...`")
            self.i = m.end()
            if m[1] in rules:
                raise self.error(f"rule {m[1]} defined twice")
            rules[m[1]] = self.alternatives(nested=False)
            self.skip(newlines=False)
            if self.i < len(self.s) and self.s[self.i] not in "\r\n":
                raise self.error(f"unexpected {self.s[self.i]!r}")


def _refs(node: Node) -> set[str]:
    kind = node[0]
    if kind == "ref":
        return {node[1]}
    if kind in ("seq", "alt"):
        return set().union(*(_refs(n) for n in node[1]))
    if kind == "rep":
        return _refs(node[1])
    return set()


@dataclass(frozen=True)
class Grammar:
    """A parsed grammar; ``root`` is where an answer starts."""

    rules: dict[str, Node]

    def matches(self, text: str) -> bool:
        """Whether the whole of ``text`` is a sentence of the grammar."""
        return len(text) in _Matcher(self.rules, text).ends(("ref", "root"), 0)

    def shortest(self) -> str:
        """A shortest sentence (a negated class gives ``x``): conforming, plainly made up."""
        return _shortest(self.rules, ("ref", "root"), frozenset())


@functools.lru_cache(maxsize=256)
def parse_grammar(text: str) -> Grammar:
    """The grammar of ``text``; ``GrammarError`` when it is none (no ``root``, a rule
    used but never defined, a syntax error)."""
    if not isinstance(text, str) or not text.strip():
        raise GrammarError("an empty grammar")
    rules = _Parser(text).rules()
    if "root" not in rules:
        raise GrammarError("no root rule")
    undefined = sorted(set().union(*(_refs(n) for n in rules.values())) - set(rules))
    if undefined:
        raise GrammarError(f"undefined rule(s) {undefined}")
    return Grammar(rules)


def _in_class(c: str, node: Node) -> bool:
    hit = any(lo <= c <= hi for lo, hi in node[2])
    return hit != node[1]


class _Matcher:
    def __init__(self, rules: dict[str, Node], text: str):
        self.rules = rules
        self.text = text
        self.memo: dict[tuple[Node, int], frozenset[int]] = {}

    def ends(self, node: Node, pos: int) -> frozenset[int]:
        key = (node, pos)
        found = self.memo.get(key)
        if found is None:
            self.memo[key] = frozenset()  # a left-recursive rule matches nothing through itself
            found = self.memo[key] = self._ends(node, pos)
        return found

    def _ends(self, node: Node, pos: int) -> frozenset[int]:
        kind, text = node[0], self.text
        if kind == "lit":
            return frozenset({pos + len(node[1])}) if text.startswith(node[1], pos) else frozenset()
        if kind in ("cls", "any"):
            ok = pos < len(text) and (kind == "any" or _in_class(text[pos], node))
            return frozenset({pos + 1}) if ok else frozenset()
        if kind == "ref":
            return self.ends(self.rules[node[1]], pos)
        if kind == "alt":
            return frozenset().union(*(self.ends(n, pos) for n in node[1]))
        if kind == "seq":
            current = frozenset({pos})
            for child in node[1]:
                current = frozenset().union(*(self.ends(child, p) for p in current))
                if not current:
                    break
            return current
        return self._repeat(node, pos)

    def _repeat(self, node: Node, pos: int) -> frozenset[int]:
        _, child, lo, hi = node
        out = {pos} if lo == 0 else set()
        current, seen = frozenset({pos}), {pos}
        count = 0
        while current and (hi is None or count < hi):
            count += 1
            current = frozenset().union(*(self.ends(child, p) for p in current))
            if count >= lo:
                out |= current
            if hi is None:
                current = current - seen  # an unbounded loop stops when it finds nothing new
                seen |= current
        return frozenset(out)


def _shortest(rules: dict[str, Node], node: Node, active: frozenset[str]) -> str:
    kind = node[0]
    if kind == "lit":
        return str(node[1])
    if kind == "any":
        return "x"
    if kind == "cls":
        if node[1]:
            return next(c for c in "xyz0 " if _in_class(c, node))
        return str(node[2][0][0])
    if kind == "ref":
        if node[1] in active:
            raise GrammarError(f"rule {node[1]} has no finite sentence")
        return _shortest(rules, rules[node[1]], active | {node[1]})
    if kind == "seq":
        return "".join(_shortest(rules, n, active) for n in node[1])
    if kind == "alt":
        options = []
        for n in node[1]:
            try:
                options.append(_shortest(rules, n, active))
            except GrammarError:
                continue
        if not options:
            raise GrammarError("an alternative with no finite sentence")
        return min(options, key=len)
    return _shortest(rules, node[1], active) * node[2]
