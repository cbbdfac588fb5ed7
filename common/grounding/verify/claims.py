"""Claim extraction per mode, and the bracket diagnostics (docs/grounding.md, 'The row').

Extraction never raises: whatever the model wrote becomes a list of
``RawClaim`` (possibly empty) plus what the checks need to know about its
shape. Checks live in ``checks.py``; the verdict in ``verdict.py``.

Decisions where the rules left room:

* Pointer tags are square brackets holding E-ids: ``[E2]``, ``[E2, E5]``,
  ``[E2,E5]``, ``[E2; E5]``, ``[e2]``; ids are normalized to ``E<n>`` (so
  ``E02`` is ``E2``). ``(E2)`` or a bare ``E2`` is not a tag.
* Pointer mode: a line with tags is a claim (tags may sit anywhere in it); a
  line made only of tags is a SCHEMA_INVALID claim; an untagged line over 20
  characters is a NO_EVIDENCE_POINTER claim; a short untagged line ("Sure!",
  "Answer:") is ignored. Bullets, numbering and ``>`` are stripped first.
* JSON mode tolerates a ```json fence (closed or not) and prose around the
  object: parsing starts at the first ``{`` when the whole text is not JSON.
  ``evidence`` may be a list or a single string; ids like ``"[E2]"`` or
  ``"e2"`` are normalized. An item of the wrong shape (not an object, no
  ``claim`` string) is a SCHEMA_INVALID claim; a top-level value of the wrong
  shape yields no claims.
* Quote mode: quoted spans are found by ``quote_spans``, which tells an
  opening from a closing ``"`` by its neighbours and allows nesting, so a quote
  that itself quotes (``"Nicknamed the "City of Light", Paris…" [E2]``) is one
  quote; ``“…”`` and ``«…»`` work too. A quote's ids are
  the tags after it on its line (before the next quote); the first quote of a
  line also takes tags written before it. ``> text [E1]`` is a quote.
  Quotes never span lines. Leading/trailing ellipses and edge punctuation are
  dropped before matching. What a line says outside its quotes and tags, when
  it is over 20 characters, is a ``tagged=False`` claim (``prose_beside_quotes``);
  the verifier counts it only beside a quote (see ``verifier.py``).
* ``answer_brackets`` counts every single-line ``[...]`` group;
  ``answer_pointer_count`` counts the distinct evidence ids cited anywhere in
  the answer (``[E2, E5]`` then ``[E2]`` is 2; in JSON mode the distinct ids
  listed in ``evidence`` when the JSON parsed): how many blocks the answer
  leans on, not how often it repeats a tag.
  ``answer_chars_with_brackets`` counts only the characters inside those
  ``[...]`` groups, the brackets themselves excluded (``[E2, E5]`` is 6): how
  much of the answer is bracketed text. ``raw_meaningful_line_count`` counts
  raw lines over 20 characters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from qfarm.common.grounding.verify.text import tokens
from qfarm.common.models import ViolationKind

MEANINGFUL_LINE_CHARS = 20

# Possessive quantifiers keep a 100 KB line of spaces or brackets linear.
TAG_RE = re.compile(
    r"\[\s*+[Ee]\s*+\d{1,9}(?:(?:\s*+[,;]\s*+|\s++)(?:and\s++)?[Ee]\s*+\d{1,9})*+\s*+\]"
)
_TAG_ID_RE = re.compile(r"[Ee]\s*(\d{1,9})")
BRACKET_RE = re.compile(r"\[[^\[\]\n]*\]")
_BULLET_RE = re.compile(r"^(?:[-*•·‣◦>]+|\(?\d{1,3}[.)]|\(?[a-zA-Z]\))\s+")
_FENCE_RE = re.compile(r"```[A-Za-z]*\s*\n?(.*?)```", re.S)
_EDGE_TRIM = " \t.…,;:"


@dataclass
class RawClaim:
    """One claim as written, before any check."""

    text: str
    ids: tuple[str, ...] = ()
    warrant: str | None = None
    tagged: bool = True
    problem: ViolationKind | None = None  # set when the claim is malformed


@dataclass
class Extraction:
    claims: list[RawClaim] = field(default_factory=list)
    tag_groups: int = 0  # pointer tags in the raw text
    json_parsed: bool | None = None  # JSON mode: an object was recovered
    json_shape_ok: bool | None = None  # JSON mode: it had a "claims" list
    items_with_ids: int = 0  # JSON mode: claim items citing at least one id


def normalize_id(raw: str) -> str:
    """``"[e02]"`` → ``"E2"``; anything that is not an E-id comes back stripped."""
    text = raw.strip().strip("[]").strip()
    m = _TAG_ID_RE.fullmatch(text)
    return f"E{int(m[1])}" if m else text


def tag_ids(tag: str) -> list[str]:
    return [f"E{int(n)}" for n in _TAG_ID_RE.findall(tag)]


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def strip_bullet(line: str) -> str:
    return _BULLET_RE.sub("", line, count=1).strip()


def bracket_diagnostics(answer: str) -> dict[str, int]:
    lines = answer.splitlines()
    return {
        "answer_brackets": len(BRACKET_RE.findall(answer)),
        "answer_pointer_count": len({i for t in TAG_RE.findall(answer) for i in tag_ids(t)}),
        "answer_chars_with_brackets": sum(len(b) - 2 for b in BRACKET_RE.findall(answer)),
        "raw_meaningful_line_count": sum(
            1 for ln in lines if len(ln.strip()) > MEANINGFUL_LINE_CHARS
        ),
    }


# --------------------------------------------------------------------------- pointer


def extract_pointer_claims(answer: str) -> Extraction:
    out = Extraction()
    for line in answer.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        tags = TAG_RE.findall(stripped)
        out.tag_groups += len(tags)
        body = strip_bullet(" ".join(TAG_RE.sub(" ", stripped).split()))
        body = body.strip(" ,;:")
        if tags:
            ids = _unique([i for t in tags for i in tag_ids(t)])
            problem = None if tokens(body) else ViolationKind.SCHEMA_INVALID
            out.claims.append(RawClaim(text=body, ids=ids, problem=problem))
        elif len(stripped) > MEANINGFUL_LINE_CHARS:
            out.claims.append(RawClaim(text=body, tagged=False))
    return out


# --------------------------------------------------------------------------- JSON


class _JsonClaim(BaseModel):
    model_config = ConfigDict(extra="ignore")

    claim: str
    evidence: list[str] = []
    warrant: str | None = None

    @field_validator("evidence", mode="before")
    @classmethod
    def _as_id_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str | int):
            value = [value]
        if isinstance(value, list):
            return [f"E{v}" if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        return value


def parse_json_object(answer: str) -> Any | None:
    """The JSON value in the answer (fence and surrounding prose tolerated), else None."""
    text = answer.strip()
    fenced = _FENCE_RE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    elif text.startswith("```"):  # an unclosed fence: a truncated reply
        text = text.split("\n", 1)[1] if "\n" in text else ""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        return None
    return value


def _json_item(item: Any) -> RawClaim:
    try:
        parsed = _JsonClaim.model_validate(item)
    except ValidationError:
        text = item.get("claim") if isinstance(item, dict) else item
        shown = text if isinstance(text, str) else json.dumps(text, default=str)[:200]
        return RawClaim(text=shown, problem=ViolationKind.SCHEMA_INVALID)
    ids = _unique([normalize_id(e) for e in parsed.evidence if e.strip()])
    text = " ".join(TAG_RE.sub(" ", parsed.claim).split())
    problem = None if tokens(text) else ViolationKind.SCHEMA_INVALID
    return RawClaim(text=text, ids=ids, warrant=parsed.warrant, problem=problem)


def extract_json_claims(answer: str) -> Extraction:
    out = Extraction(tag_groups=len(TAG_RE.findall(answer)))
    value = parse_json_object(answer)
    out.json_parsed = value is not None
    items = value.get("claims") if isinstance(value, dict) else None
    out.json_shape_ok = isinstance(items, list)
    if not isinstance(items, list):
        return out
    for item in items:
        claim = _json_item(item)
        out.claims.append(claim)
        if claim.ids:
            out.items_with_ids += 1
    return out


# --------------------------------------------------------------------------- quote


def _trim_quote(text: str) -> str:
    return text.strip().strip(_EDGE_TRIM).strip()


_OPEN_AFTER = frozenset(" \t([{-–—:>/")
_CLOSE_BEFORE = frozenset(" \t.,;:!?)]}-–—…'\"[")


def quote_spans(line: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each outermost quoted span on a line, nesting allowed.

    A straight ``"`` opens when it follows a space, the line start or an opening
    bracket and precedes a non-space; it closes when it follows a non-space and
    precedes a space, the line end or punctuation. ``“”`` and ``«»`` are directional.
    So ``"Nicknamed the "City of Light", Paris"`` is one span and
    ``"a b c" [E1] and "d e f"`` two.
    """
    spans: list[tuple[int, int]] = []
    depth_starts: list[int] = []
    last = len(line) - 1
    for i, ch in enumerate(line):
        if ch not in '"“”«»':
            continue
        prev = line[i - 1] if i > 0 else " "
        nxt = line[i + 1] if i < last else " "
        if ch in "”»":
            can_open, can_close = False, True
        elif ch in "“«":
            can_open, can_close = True, False
        else:
            can_open = prev in _OPEN_AFTER and not nxt.isspace()
            can_close = not prev.isspace() and (nxt.isspace() or nxt in _CLOSE_BEFORE)
        if depth_starts and can_close:
            start = depth_starts.pop()
            if not depth_starts and i > start + 1:
                spans.append((start + 1, i))
        elif can_open:
            depth_starts.append(i)
    return spans


def _ids_between(tags: list[re.Match[str]], lo: int, hi: int) -> tuple[str, ...]:
    return _unique([i for t in tags if lo <= t.start() < hi for i in tag_ids(t.group(0))])


def _quotes_on_line(line: str) -> list[RawClaim]:
    if line.startswith(">"):
        body = line.lstrip("> ").strip()
        ids = _unique([i for t in TAG_RE.findall(body) for i in tag_ids(t)])
        text = " ".join(TAG_RE.sub(" ", body).split())
        spans = quote_spans(text)
        if len(spans) == 1 and spans[0][0] == 1 and spans[0][1] >= len(text.rstrip(_EDGE_TRIM)) - 1:
            text = text[spans[0][0] : spans[0][1]]
        return [RawClaim(text=_trim_quote(text), ids=ids)]
    tags = list(TAG_RE.finditer(line))
    spans = quote_spans(line)
    found: list[RawClaim] = []
    for n, (start, end) in enumerate(spans):
        next_start = spans[n + 1][0] if n + 1 < len(spans) else len(line)
        ids = _ids_between(tags, end, next_start)
        if not ids and n == 0:
            ids = _ids_between(tags, 0, start)
        found.append(RawClaim(text=_trim_quote(line[start:end]), ids=ids))
    return found


def prose_beside_quotes(line: str) -> str:
    """What a quote-mode line says outside its quotes and tags (bullets and edges stripped)."""
    if line.startswith(">"):
        return ""
    spans = quote_spans(line)
    kept, pos = [], 0
    for start, end in spans:
        kept.append(line[pos : start - 1])  # the opening mark goes with the quote
        pos = end + 1
    kept.append(line[pos:])
    rest = " ".join(TAG_RE.sub(" ", " ".join(kept)).split())
    return strip_bullet(rest).strip(" ,;:.-–—()")


def extract_quotes(answer: str) -> Extraction:
    out = Extraction(tag_groups=len(TAG_RE.findall(answer)))
    for line in answer.splitlines():
        stripped = line.strip()
        if stripped:
            out.claims.extend(_quotes_on_line(stripped))
            prose = prose_beside_quotes(stripped)
            if len(prose) > MEANINGFUL_LINE_CHARS:
                out.claims.append(RawClaim(text=prose, tagged=False))
    return out
