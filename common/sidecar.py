"""Answerability sidecar: flags a denial while the evidence holds candidates.

The rules: docs/grounding.md, 'Answerability sidecar'.

Read-only and byte-deterministic: no model calls, no writes, never changes the
answer or the verdict. It returns None unless all three clauses fire:

* A, denial: the casefolded, whitespace-normalized answer contains one of
  ``DENIAL_PATTERNS`` (version ``DENIAL_PATTERNS_VERSION``), the documented
  set ``denial_phrasings()`` writes out: the nine v1 substrings, then
  first-person failures to find ("i could not find"), sources that do not say
  ("passages do not list"), absence in the sources ("not listed in the"), "no
  information about", "makes no mention of", "none of the passages mention";
  each needs its object, so "he could not find a publisher" and "the evidence
  does not contradict" are no denials;
* B, extraction shape: an ``EXTRACTION_CUES`` phrase, a broad quantifier
  (ALL, COMPREHENSIVE, OPEN_REQUEST, MANY), or a plural of things
  (``PLURAL_THINGS``) in the question;
* C, candidates: spans of the question's answer type within
  ``answerability_proximity_chars`` of a subject mention in some block.

Decisions where the rules left room:

* Answer type: the matched cue decides (``CUE_ANSWER_TYPES``); without a cue,
  a question starting with "who" or naming people in the plural (members,
  players, ...) wants a ``person``, "when"/"what year" a ``date``, anything
  else ``title_like``.
* Subject tokens are the question's tokens minus stop words, cue words,
  relation words and quantifier words (``SUBJECT_DROP_WORDS``), in order.
  A block takes part only if it contains *every* subject token (case-
  insensitive, on word boundaries); a mention is any occurrence of a subject
  token there, an *exact* mention the whole subject phrase in order. This is
  what keeps "songs by John Smith" silent on a block naming "John Harvard".
* Candidates, by kind: title_like → ``quoted_string`` (``"…"``, ``“…”``),
  ``title_case_span`` (two or more capitalized words; small connectors such as
  "of", "the", "and" allowed inside) and ``comma_list_item`` (items of comma
  lists of three or more short items); person → ``title_case_span`` without
  "and"/"of"/"the" inside (name particles such as "da", "von" allowed); date →
  ``date`` (day-month-year) and ``year`` (1000–2099, not inside a date). A
  quoted string is never dropped for its words ("What's Up With That" is all
  stop words and still a title: the quotes say so); an unquoted run or list
  item made only of subject and stop words (the subject's own name) is
  dropped, and so is one overlapping a quoted string.
* Evidence may be ``Evidence`` objects or plain dicts with the same keys (the
  sidecar also runs on logged rows); a block without a string ``text`` is
  skipped, one without an ``id`` takes its positional id E1..Ek.
* Confidence: ``strong`` = a quoted candidate within proximity of an exact
  subject mention and at least ``STRONG_MIN_CANDIDATES`` candidates;
  ``medium`` = at least 2 candidates, or a quoted one near an exact mention;
  ``weak`` = one candidate. ``answerability_threshold`` is the minimum class
  reported; below it the result is None.
* ``candidate_count`` counts every candidate found; the span list holds at
  most 10: quoted strings first, then by evidence rank and offset. Offsets
  index ``Evidence.text`` (``offset_basis: "evidence_object_text"``), so
  ``text[offset_start:offset_end]`` is the span's text exactly.
* The result also carries ``denial_patterns_version`` and
  ``extraction_cues_version`` besides the keys listed in docs/grounding.md,
  'Answerability sidecar'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.models import Answerability, CandidateSpan, Confidence, Evidence, QuantifierInfo
from common.policy import Policy
from common.quantifier import classify_question_quantifier
from common.verify.text import STOP_WORDS, joined, normalize, tokens
from common.versions import DENIAL_PATTERNS_VERSION, EXTRACTION_CUES_VERSION
from common.vocab import BROAD_INTENSITIES

DIAGNOSTIC_VERSION = "answerability-v2"  # v2: design's candidate kinds, quoted strings always kept
MAX_SPANS = 10
STRONG_MIN_CANDIDATES = 3
CONFIDENCE_ORDER: tuple[Confidence, ...] = tuple(Confidence)
# Clause A. The nine v1 substrings first (so an old row's ``denial_pattern_matched`` keeps
# its meaning), then ``denial_phrasings()``: negation × verb × object, written out.
_DENIAL_V1: tuple[str, ...] = (
    "not mentioned",
    "not provided",
    "the evidence does not say",
    "does not mention",
    "no specific",
    "no evidence",
    "cannot determine from the provided evidence",
    "is not stated",
    "is not specified",
)
_FIRST_PERSON_FAILURES = (
    "i could not",
    "i couldn't",
    "i cannot",
    "i can't",
    "i was unable to",
    "i am unable to",
    "i'm unable to",
    "we could not",
    "we couldn't",
    "we were unable to",
)
_FIND_VERBS = ("find", "identify", "locate")
_SOURCE_NOUNS_SINGULAR = ("evidence", "context", "provided text")
_SOURCE_NOUNS_PLURAL = ("passages", "documents", "sources", "excerpts")
_NEGATED_VERBS = ("mention", "list", "include", "contain", "name", "provide", "specify", "identify")
_ABSENT_IN = ("listed", "named", "found", "included", "given", "present", "discussed")


def denial_phrasings() -> tuple[str, ...]:
    """The documented denial set: every phrasing clause A matches, in match order."""
    out: list[str] = list(_DENIAL_V1)
    # "I could not find any works by X ..." (first person only: "he could not find a
    # publisher" is a fact about him, not a denial about the evidence)
    out += [f"{who} {verb}" for who in _FIRST_PERSON_FAILURES for verb in _FIND_VERBS]
    # "The provided passages do not list works by X"
    for neg, nouns in (("does not", _SOURCE_NOUNS_SINGULAR), ("do not", _SOURCE_NOUNS_PLURAL)):
        short = neg.replace(" not", "n't")
        out += [
            f"{noun} {n} {verb}" for noun in nouns for n in (neg, short) for verb in _NEGATED_VERBS
        ]
    # "The songs are not listed in the evidence" (bare "not listed" is often a plain fact)
    out += [f"not {verb} in the" for verb in _ABSENT_IN]
    out += [f"not {verb} anywhere in the" for verb in ("mentioned", "listed", "named")]
    # "There is no information about X", "the passages make no mention of X"
    out += [
        f"no {what} {about}"
        for what in ("information", "mention", "details", "record")
        for about in ("about", "of", "on", "regarding")
    ]
    out += [
        "makes no mention of",
        "make no mention of",
        "evidence is silent on",
        "passages are silent on",
    ]
    # "None of the passages mention X"
    out += [
        f"none of the {noun} {verb}"
        for noun in ("passages", "documents", "sources", "evidence blocks")
        for verb in ("mention", "mentions", "list", "lists", "name", "names", "include", "includes")
    ]
    out += [
        "not in the evidence",
        "not in the provided",
        "not contained in the",
        "cannot be determined from the",
        "not possible to determine from the",
        "unable to determine from the",
    ]
    return tuple(dict.fromkeys(out))


DENIAL_PATTERNS: tuple[str, ...] = denial_phrasings()
DENIAL_TRIGGERS: tuple[str, ...] = ("not", "n't", "no ", "none", "unable", "silent")

CUE_ANSWER_TYPES: dict[str, str] = {
    "songs by": "title_like",
    "works by": "title_like",
    "books by": "title_like",
    "albums by": "title_like",
    "novels by": "title_like",
    "poems by": "title_like",
    "plays by": "title_like",
    "films by": "title_like",
    "movies by": "title_like",
    "paintings by": "title_like",
    "compositions by": "title_like",
    "singles by": "title_like",
    "list of": "title_like",
    "name all": "title_like",
    "list all": "title_like",
    "names of": "title_like",
    "titles of": "title_like",
    "discography": "title_like",
    "who wrote": "person",
    "who composed": "person",
    "who painted": "person",
    "who directed": "person",
    "who sang": "person",
    "who founded": "person",
    "who invented": "person",
    "who discovered": "person",
    "members of": "person",
    "what year": "date",
    "which year": "date",
    "in what year": "date",
    "what date": "date",
    "when was": "date",
    "when did": "date",
}
EXTRACTION_CUES: tuple[str, ...] = tuple(CUE_ANSWER_TYPES)

PERSON_PLURALS: frozenset[str] = frozenset(
    "members players authors writers composers founders leaders presidents kings queens "
    "children singers artists painters scientists actors musicians winners".split()
)
PLURAL_THINGS: frozenset[str] = (
    frozenset(
        "songs works books albums novels poems plays films movies paintings compositions "
        "singles records tracks titles characters episodes operas symphonies sculptures "
        "inventions discoveries awards names".split()
    )
    | PERSON_PLURALS
)
_RELATION_WORDS = frozenset(
    "by of about from written wrote write composed compose sang sing performed perform "
    "released recorded made created directed painted founded invented discovered song work "
    "book album novel poem play film movie painting title member list name give tell me "
    "famous known best popular notable main major year date did does do has have had "
    "called named some every all each any various several few number lot lots release "
    "releases record records sings writes composes perform performs publish published "
    "appear appeared play played star starred feature featured include included produce "
    "produced well good great greatest important significant influential remembered "
    "celebrated acclaimed".split()
)
SUBJECT_DROP_WORDS: frozenset[str] = (
    STOP_WORDS
    | _RELATION_WORDS
    | PLURAL_THINGS
    | frozenset(w for cue in EXTRACTION_CUES for w in cue.split())
)

_CAP = r"[A-ZÀ-ÖØ-Þ][\w'’&-]*"
# "Pride and Prejudice" is one title, "George Harrison and Ringo Starr" two names.
_TITLE_CASE_RE = re.compile(
    rf"(?<![\w'’-]){_CAP}(?:\s+(?:(?:of|the|and|de|da|del|di|van|von|in|on|a|an|for|to)\s+)*{_CAP})+"
)
_NAME_RE = re.compile(rf"(?<![\w'’-]){_CAP}(?:\s+(?:(?:de|da|del|di|van|von)\s+)*{_CAP})+")
_QUOTED_RE = re.compile(r'"([^"\n]{1,120})"|“([^”\n]{1,120})”')
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_YEAR = "(?:1[0-9]{3}|20[0-9]{2})"
_DATE_RE = re.compile(rf"\b(?:\d{{1,2}} (?:{_MONTHS}) {_YEAR}|(?:{_MONTHS}) \d{{1,2}}, {_YEAR})\b")
_YEAR_RE = re.compile(rf"\b{_YEAR}\b")
_SENTENCE_RE = re.compile(r"[^.;:!?\n]+")
# Candidate kinds (the names the design uses; ``DIAGNOSTIC_VERSION`` v2).
QUOTED, TITLE_CASE, LIST_ITEM, YEAR, DATE = (
    "quoted_string",
    "title_case_span",
    "comma_list_item",
    "year",
    "date",
)
_KINDS_BY_TYPE: dict[str, frozenset[str]] = {
    "title_like": frozenset({QUOTED, TITLE_CASE, LIST_ITEM}),
    "person": frozenset({TITLE_CASE}),
    "date": frozenset({YEAR, DATE}),
}


@dataclass(frozen=True)
class Candidate:
    evidence_rank: int
    evidence_id: str
    kind: str
    start: int
    end: int
    text: str
    near_exact: bool

    def as_span(self) -> CandidateSpan:
        return CandidateSpan(
            evidence_id=self.evidence_id,
            kind=self.kind,
            text=self.text,
            offset_start=self.start,
            offset_end=self.end,
        )


def match_denial(answer: str) -> str | None:
    """Clause A: the first denial pattern (in list order) found in the answer."""
    text = normalize(answer)  # already whitespace-collapsed
    # Every phrasing holds one of these words; most answers hold none, and skip 200+ scans.
    if not any(t in text for t in DENIAL_TRIGGERS):
        return None
    return next((p for p in DENIAL_PATTERNS if p in text), None)


def match_extraction_shape(
    question: str, quantifier: QuantifierInfo
) -> tuple[str | None, str | None]:
    """Clause B: ``(shape, cue)`` where shape is cue / quantifier / plural, or ``(None, None)``."""
    text = joined(tokens(question))
    cue = next((c for c in EXTRACTION_CUES if f" {c} " in text), None)
    if cue is not None:
        return "cue", cue
    if quantifier.intensity in BROAD_INTENSITIES:
        return "quantifier", None
    if any(t in PLURAL_THINGS for t in text.split()):
        return "plural", None
    return None, None


def answer_type_for(question: str, cue: str | None) -> str:
    if cue is not None:
        return CUE_ANSWER_TYPES[cue]
    toks = tokens(question)
    first = toks[0] if toks else ""
    if first == "when" or " what year" in f" {' '.join(toks)}":
        return "date"
    if first in ("who", "whom", "whose") or any(t in PERSON_PLURALS for t in toks):
        return "person"
    return "title_like"


def subject_tokens_for(question: str) -> list[str]:
    toks = [t for t in tokens(question) if len(t) > 1 and t not in SUBJECT_DROP_WORDS]
    return list(dict.fromkeys(toks))


def _word_re(token: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(token)}(?!\w)", re.I)


def _raw_candidates(text: str, answer_type: str) -> list[tuple[str, int, int]]:
    """``(kind, start, end)`` spans of the answer type in a block's text."""
    found: list[tuple[str, int, int]] = []
    if answer_type == "date":
        dates = [(DATE, m.start(), m.end()) for m in _DATE_RE.finditer(text)]
        years = [
            (YEAR, m.start(), m.end())
            for m in _YEAR_RE.finditer(text)
            if not any(s <= m.start() < e for _, s, e in dates)
        ]
        return dates + years
    if answer_type == "title_like":
        for m in _QUOTED_RE.finditer(text):
            group = 1 if m.group(1) is not None else 2
            found.append((QUOTED, m.start(group), m.end(group)))
    runs = _TITLE_CASE_RE if answer_type == "title_like" else _NAME_RE
    found += [(TITLE_CASE, m.start(), m.end()) for m in runs.finditer(text)]
    if answer_type == "title_like":
        found += _list_items(text)
    return found


def _list_items(text: str) -> list[tuple[str, int, int]]:
    items: list[tuple[str, int, int]] = []
    for sentence in _SENTENCE_RE.finditer(text):
        parts = re.split(r",|\band\b|\bor\b", sentence.group(0))
        pieces = [p for p in parts if p.strip()]
        if sentence.group(0).count(",") < 2 or len(pieces) < 3:
            continue
        cursor = sentence.start()
        for part in parts:
            start = text.index(part, cursor) if part else cursor
            cursor = start + len(part)
            stripped = part.strip()
            if stripped and len(stripped.split()) <= 5:
                lead = part.index(stripped)
                items.append((LIST_ITEM, start + lead, start + lead + len(stripped)))
    return items


def _distance(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, max(a[0], b[0]) - min(a[1], b[1]))


def _blocks(evidence: Sequence[Evidence | Mapping[str, Any]]) -> list[tuple[int, str, str]]:
    """``(rank, id, text)`` of each usable block, from ``Evidence`` objects or logged dicts.

    A block without a string ``text`` is skipped (a logged row may hold only ids and
    titles); one without an ``id`` takes its positional id, E1..Ek, as the prompt did.
    """
    out = []
    for rank, ev in enumerate(evidence):
        raw = ev if isinstance(ev, Mapping) else {"id": ev.id, "text": ev.text}
        text = raw.get("text")
        if not isinstance(text, str):
            continue
        out.append((rank, str(raw.get("id") or f"E{rank + 1}"), text))
    return out


def _block_candidates(
    rank: int, ev_id: str, text: str, subject: list[str], answer_type: str, proximity: int
) -> list[Candidate]:
    mentions: list[tuple[int, int]] = []
    for tok in subject:
        spans = [(m.start(), m.end()) for m in _word_re(tok).finditer(text)]
        if not spans:
            return []  # every subject token must occur in the block
        mentions += spans
    phrase = re.compile(r"(?<!\w)" + r"\W+".join(map(re.escape, subject)) + r"(?!\w)", re.I)
    exact = [(m.start(), m.end()) for m in phrase.finditer(text)]
    subject_set = set(subject)
    kept: dict[tuple[int, int], Candidate] = {}
    quoted_spans: list[tuple[int, int]] = []
    allowed = _KINDS_BY_TYPE[answer_type]
    for kind, start, end in sorted(
        _raw_candidates(text, answer_type), key=lambda c: c[0] != QUOTED
    ):
        span = (start, end)
        if kind not in allowed or span in kept:
            continue
        words = set(tokens(text[start:end]))
        if not words:
            continue
        # Quoting is the evidence's own word that this is a title ("What's Up With That"
        # is all stop words); only unquoted runs that are just the subject's name drop out.
        if kind != QUOTED and words <= (subject_set | STOP_WORDS):
            continue
        if kind != QUOTED and any(_distance(span, q) == 0 for q in quoted_spans):
            continue
        if not any(_distance(span, m) <= proximity for m in mentions):
            continue
        near_exact = any(_distance(span, m) <= proximity for m in exact)
        kept[span] = Candidate(rank, ev_id, kind, start, end, text[start:end], near_exact)
        if kind == QUOTED:
            quoted_spans.append(span)
    return list(kept.values())


def _confidence(candidates: list[Candidate]) -> Confidence | None:
    quoted_near_exact = any(c.kind == QUOTED and c.near_exact for c in candidates)
    if quoted_near_exact and len(candidates) >= STRONG_MIN_CANDIDATES:
        return Confidence.STRONG
    if len(candidates) >= 2 or quoted_near_exact:
        return Confidence.MEDIUM
    return Confidence.WEAK if candidates else None


def assess_answerability(
    question: str,
    answer: str,
    evidence: Sequence[Evidence | Mapping[str, Any]],
    policy: Policy,
    quantifier: QuantifierInfo | None = None,
) -> Answerability | None:
    """The sidecar's three-clause check; None unless denial, extraction shape and candidates all fire."""
    if not policy.answerability_sidecar_enabled:
        return None
    denial = match_denial(answer if isinstance(answer, str) else "")
    if denial is None:
        return None
    shape, cue = match_extraction_shape(
        question, quantifier or classify_question_quantifier(question)
    )
    if shape is None:
        return None
    subject = subject_tokens_for(question)
    if not subject:
        return None
    answer_type = answer_type_for(question, cue)
    proximity = policy.answerability_proximity_chars
    candidates = [
        c
        for rank, ev_id, text in _blocks(evidence)
        for c in _block_candidates(rank, ev_id, text, subject, answer_type, proximity)
    ]
    confidence = _confidence(candidates)
    if confidence is None:
        return None
    if CONFIDENCE_ORDER.index(confidence) < CONFIDENCE_ORDER.index(policy.answerability_threshold):
        return None
    ordered = sorted(candidates, key=lambda c: (c.kind != QUOTED, c.evidence_rank, c.start, c.end))
    return Answerability(
        diagnostic_version=DIAGNOSTIC_VERSION,
        confidence_class=confidence,
        triggered_clauses=("denial", "extraction_shape", "candidates_in_evidence"),
        denial_pattern_matched=denial,
        extraction_cue_matched=cue,
        extraction_shape=shape,
        answer_type=answer_type,
        subject_tokens=tuple(subject),
        candidate_count=len(candidates),
        threshold=policy.answerability_threshold,
        missed_answer_candidate_spans=tuple(c.as_span() for c in ordered[:MAX_SPANS]),
        denial_patterns_version=DENIAL_PATTERNS_VERSION,
        extraction_cues_version=EXTRACTION_CUES_VERSION,
    )
