"""Answerability sidecar: flags a denial while the evidence holds candidates.

The rules: docs/grounding.md, 'Answerability sidecar'.

Read-only and byte-deterministic: no model calls, no writes, never changes the
answer or the verdict. It returns None unless all three clauses fire:

* A, denial: the grammar of ``common/grounding/denials.py`` (version
  ``DENIAL_PATTERNS_VERSION``) reads a denial of the answer in the
  casefolded, whitespace-normalized answer; a denial of a detail of another
  kind than the question asks for ("the release dates are not mentioned" for
  "songs by …") does not count;
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
  relation words, quantifier words and the question's verbs in any form
  (``SUBJECT_DROP_WORDS``, ``verb_forms``, and the word after "did … <Name>"),
  in order. A block takes part only if its text contains *every* subject
  token or a known alias of it (``NAME_ALIASES``: Bob/Robert …), or its
  article's title does (case-insensitive, on word boundaries); a mention is
  any occurrence of a subject token there, an *exact* mention the whole
  subject phrase in order (middle names allowed between), and in a block
  whose title names the subject every mention is exact. This is what keeps
  "songs by John Smith" silent on a block naming "John Harvard".
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
  subject mention and at least ``STRONG_MIN_CANDIDATES`` (2) candidates;
  ``medium`` = at least 2 candidates, a quoted one near an exact mention, or
  the one candidate a one-answer question ("who wrote …", "what year …")
  asks for; ``weak`` = one candidate for a question asking for several. ``answerability_threshold`` is the minimum class
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

from qfarm.common.grounding import denials
from qfarm.common.grounding.quantifier import classify_question_quantifier
from qfarm.common.grounding.verify.text import STOP_WORDS, joined, tokens
from qfarm.common.models import (
    Answerability,
    CandidateSpan,
    Confidence,
    Evidence,
    Label,
    QuantifierInfo,
    Verdict,
    Verification,
)
from qfarm.common.policy import Policy
from qfarm.common.versions import DENIAL_PATTERNS_VERSION, EXTRACTION_CUES_VERSION
from qfarm.common.vocab import BROAD_INTENSITIES

DIAGNOSTIC_VERSION = "answerability-v4"  # v3: title/alias subjects, strong at 2, single answers; v4: named candidates dropped
MAX_SPANS = 10
# "strong": a quoted candidate near an exact subject mention and more than one candidate
STRONG_MIN_CANDIDATES = 2
CONFIDENCE_ORDER: tuple[Confidence, ...] = tuple(Confidence)


def match_denial(answer: str) -> str | None:
    """Clause A without a question: the words of the first denial, or None.

    Without a question every detail a denial names counts as another kind than
    the (title-like) answer, so "the release dates are not mentioned" is None.
    """
    denial = denials.match_denial(answer if isinstance(answer, str) else "")
    return denial.matched if denial else None


def denial_of_answer(question: str, answer: str) -> denials.Denial | None:
    """Clause A: the first denial in the answer that denies the answer, not a detail."""
    _shape, cue = match_extraction_shape(question, classify_question_quantifier(question))
    return _denial_for(question, answer, answer_type_for(question, cue))


def _denial_for(question: str, answer: str, answer_type: str) -> denials.Denial | None:
    words = {t for t in tokens(question) if t not in STOP_WORDS}
    return denials.match_denial(answer if isinstance(answer, str) else "", words, answer_type)


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
    "who designed": "person",
    "who built": "person",
    "who created": "person",
    "who produced": "person",
    "who sculpted": "person",
    "who developed": "person",
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
# Cues whose question has one answer: one named author for "who wrote" is the answer.
SINGLE_ANSWER_CUES: frozenset[str] = frozenset(
    c for c in EXTRACTION_CUES if c.startswith(("who ", "what year", "which year", "in what", "what date", "when "))
)

PERSON_PLURALS: frozenset[str] = frozenset(
    "members players authors writers composers founders leaders presidents kings queens "
    "children singers artists painters scientists actors musicians winners".split()
)
PLURAL_THINGS: frozenset[str] = (
    frozenset(
        "songs works books albums novels poems plays films movies paintings compositions "
        "singles records tracks titles characters episodes operas symphonies sculptures "
        "inventions discoveries awards names ballets essays stories collections buildings "
        "designs concertos sonatas operettas musicals games series shows photographs "
        "poetry".split()
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
    "celebrated acclaimed best-known well-known short collection collections poetry "
    "essay essays story stories ballet ballets".split()
)
# Verbs a question asks with ("What paintings did Frida Kahlo create?"): every form of
# each is dropped from the subject, so "create" never has to occur in the evidence.
QUESTION_VERBS: tuple[str, ...] = tuple(
    """create make direct open build write compose paint sing record release publish produce
    found invent discover design draw sculpt film shoot star act play perform win earn receive
    hold lead establish author pen sign marry visit conquer rule launch develop construct erect
    devise coin introduce score edit illustrate translate narrate patent premiere stage choreograph
    photograph carve cast craft forge manufacture engineer program code invent pioneer formulate
    propose describe name call appear feature include discover explore found own run manage coach
    teach study compose arrange co-write co-found cover sample remix host present broadcast air
    debut tour collaborate contribute participate compete defeat beat capture invade occupy
    inherit bequeath commission restore complete finish start begin end leave take give do get
    become bring think speak choose drive rise fight see know grow throw fly sell tell keep meet
    pay put read ride say send set sit stand strike swim wear weave dig bear undertake overcome
    hit seal""".split()
)
_IRREGULAR_FORMS: dict[str, tuple[str, ...]] = {
    "make": ("made",), "write": ("wrote", "written"), "build": ("built",), "sing": ("sang", "sung"),
    "draw": ("drew", "drawn"), "win": ("won",), "lead": ("led",), "hold": ("held",),
    "shoot": ("shot",), "take": ("took", "taken"), "give": ("gave", "given"), "do": ("did", "done"),
    "begin": ("began", "begun"), "become": ("became",), "bring": ("brought",),
    "teach": ("taught",), "think": ("thought",), "speak": ("spoke", "spoken"), "run": ("ran",),
    "choose": ("chose", "chosen"), "drive": ("drove", "driven"), "rise": ("rose", "risen"),
    "fight": ("fought",), "see": ("saw", "seen"), "know": ("knew", "known"),
    "grow": ("grew", "grown"), "throw": ("threw", "thrown"), "fly": ("flew", "flown"),
    "sell": ("sold",), "tell": ("told",), "keep": ("kept",), "leave": ("left",), "meet": ("met",),
    "pay": ("paid",), "say": ("said",), "send": ("sent",), "sit": ("sat",), "stand": ("stood",),
    "strike": ("struck",), "swim": ("swam", "swum"), "wear": ("wore", "worn"),
    "weave": ("wove", "woven"), "dig": ("dug",), "bear": ("bore", "borne"), "get": ("got", "gotten"),
    "undertake": ("undertook", "undertaken"), "overcome": ("overcame",), "hit": ("hit",),
    "co-write": ("co-wrote", "co-written"), "beat": ("beaten",), "cast": ("cast",),
    "set": ("set",), "put": ("put",), "read": ("read",), "ride": ("rode", "ridden"),
}  # fmt: skip
_DOUBLING = frozenset("star pen plan stop drop shop scan map ban rob debut".split()) - {"debut"}


def verb_forms(lemma: str) -> frozenset[str]:
    """The base, -s, past, participle and -ing forms of a verb (regular rules + exceptions)."""
    forms = {lemma, *_IRREGULAR_FORMS.get(lemma, ())}
    stem = lemma + lemma[-1] if lemma in _DOUBLING else lemma
    if re.search(r"(?:s|x|z|ch|sh)$", lemma):
        forms.add(lemma + "es")
    elif re.search(r"[^aeiou]y$", lemma):
        forms.add(lemma[:-1] + "ies")
    else:
        forms.add(lemma + "s")
    if lemma.endswith("e"):
        forms |= {lemma + "d", lemma[:-1] + "ing" if not lemma.endswith("ee") else lemma + "ing"}
    elif re.search(r"[^aeiou]y$", lemma):
        forms |= {lemma[:-1] + "ied", lemma + "ing"}
    else:
        forms |= {stem + "ed", stem + "ing"}
    return frozenset(forms)


QUESTION_VERB_FORMS: frozenset[str] = frozenset(f for v in QUESTION_VERBS for f in verb_forms(v))
SUBJECT_DROP_WORDS: frozenset[str] = (
    STOP_WORDS
    | _RELATION_WORDS
    | PLURAL_THINGS
    | QUESTION_VERB_FORMS
    | frozenset(w for cue in EXTRACTION_CUES for w in cue.split())
)
# The verb after "did/does/has … <Name>" is a verb even when no table knows it
# ("What films did Kubrick helm?").
_AUX_SUBJECT_VERB_RE = re.compile(
    r"\b(?:did|does|do|has|have|had|will|would|can|could|should)\s+(?:the\s+)?"
    r"(?:[A-ZÀ-ÖØ-Þ][\w'’.-]*\s+)+(?P<verb>[a-z][a-z-]+)\b"
)
# Given names and their common other forms: a subject "Bob Marley" is the article
# "Robert Nesta Marley" describes (and the other way round).
_NAME_ALIAS_GROUPS: tuple[tuple[str, ...], ...] = (
    ("robert", "bob", "bobby", "rob", "robbie"), ("william", "bill", "billy", "will", "willie"),
    ("james", "jim", "jimmy", "jamie"), ("john", "jack", "johnny"), ("thomas", "tom", "tommy"),
    ("richard", "dick", "rick", "richie", "ricky"), ("michael", "mike", "mick", "mickey"),
    ("katherine", "catherine", "kate", "katie", "cathy", "kathy"),
    ("elizabeth", "liz", "beth", "betty", "lizzie", "eliza"), ("anthony", "tony"),
    ("edward", "ted", "teddy", "ned", "ed", "eddie"), ("henry", "harry", "hank"),
    ("charles", "chuck", "charlie"), ("margaret", "peggy", "maggie", "meg"),
    ("alexander", "alex", "sasha", "sandy"), ("frederick", "fred", "freddie"),
    ("francis", "frank", "frankie"), ("joseph", "joe", "joey"), ("lawrence", "larry"),
    ("nicholas", "nick"), ("patrick", "pat", "paddy"), ("samuel", "sam"),
    ("stephen", "steven", "steve"), ("susan", "sue", "susie"), ("david", "dave", "davy"),
    ("daniel", "dan", "danny"), ("andrew", "andy", "drew"), ("benjamin", "ben", "benny"),
    ("christopher", "chris", "kit"), ("gregory", "greg"), ("jonathan", "jon"),
    ("kenneth", "ken", "kenny"), ("matthew", "matt"), ("peter", "pete"), ("philip", "phil"),
    ("ronald", "ron", "ronnie"), ("timothy", "tim"), ("vincent", "vince"),
    ("abraham", "abe"), ("jeffrey", "jeff"), ("jennifer", "jenny", "jen"),
    ("dorothy", "dot", "dolly"), ("mary", "molly", "polly"), ("ludwig", "louis"),
    ("wolfgang", "wolf"), ("giuseppe", "joseph"), ("johann", "john", "johannes"),
)  # fmt: skip
NAME_ALIASES: dict[str, frozenset[str]] = {}
for _group in _NAME_ALIAS_GROUPS:
    for _name in _group:
        NAME_ALIASES[_name] = NAME_ALIASES.get(_name, frozenset({_name})) | frozenset(_group)

_CAP = r"[A-ZÀ-ÖØ-Þ][\w'’&-]*"
# "Pride and Prejudice" is one title, "George Harrison and Ringo Starr" two names.
_PARTICLES = "de|da|del|della|di|du|des|van|von|der|den|ter|ten|le|la|bin|ibn|al|dos|das"
_TITLE_CASE_RE = re.compile(
    rf"(?<![\w'’-]){_CAP}(?:\s+(?:(?:of|the|and|{_PARTICLES}|in|on|a|an|for|to)\s+)*{_CAP})+"
)
# "Daphne du Maurier", "Ludwig van Beethoven": a particle stands inside a name
_NAME_RE = re.compile(rf"(?<![\w'’-]){_CAP}(?:\s+(?:(?:{_PARTICLES})\s+)*{_CAP})+")
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
    """The question's subject words: its tokens less stop, cue, relation and verb words."""
    verbs = {m["verb"] for m in _AUX_SUBJECT_VERB_RE.finditer(question)}
    toks = [
        t
        for t in tokens(question)
        if len(t) > 1 and t not in SUBJECT_DROP_WORDS and t not in verbs
    ]
    return list(dict.fromkeys(toks))


def _alias_re(token: str) -> str:
    names = sorted(NAME_ALIASES.get(token, frozenset({token})), key=len, reverse=True)
    return "(?:" + "|".join(map(re.escape, names)) + ")"


def _subject_in(text: str, subject: list[str]) -> bool:
    """Every subject word, or a known alias of it, occurs in the text."""
    return all(re.search(rf"(?<!\w){_alias_re(t)}(?!\w)", text, re.I) for t in subject)


def _word_re(token: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){_alias_re(token)}(?!\w)", re.I)


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


def _blocks(
    evidence: Sequence[Evidence | Mapping[str, Any]],
) -> list[tuple[int, str, str, str]]:
    """``(rank, id, text, title)`` of each usable block, from ``Evidence`` objects or dicts.

    A block without a string ``text`` is skipped (a logged row may hold only ids and
    titles); one without an ``id`` takes its positional id, E1..Ek, as the prompt did.
    """
    out = []
    for rank, ev in enumerate(evidence):
        raw = ev if isinstance(ev, Mapping) else {"id": ev.id, "text": ev.text, "title": ev.title}
        text = raw.get("text")
        if not isinstance(text, str):
            continue
        title = raw.get("title")
        out.append(
            (rank, str(raw.get("id") or f"E{rank + 1}"), text, title if isinstance(title, str) else "")
        )
    return out


def _block_candidates(
    block: tuple[int, str, str, str], subject: list[str], answer_type: str, proximity: int
) -> list[Candidate]:
    rank, ev_id, text, title = block
    # The block is about the subject when its text names every subject word (or a known
    # alias of it), or when its article's title does: the passage of "Bob Dylan" that
    # says "Robert Allen Zimmerman … Dylan's songs" is about the question's Bob Dylan.
    by_title = bool(title) and _subject_in(title, subject)
    if not by_title and not _subject_in(text, subject):
        return []
    mentions = [(m.start(), m.end()) for tok in subject for m in _word_re(tok).finditer(text)]
    # an exact mention may carry middle names or initials: "Robert Nesta Marley"
    between = r"\W+(?:(?-i:[A-ZÀ-ÖØ-Þ])[\w'’-]*\.?\W+){0,2}"
    phrase = re.compile(r"(?<!\w)" + between.join(map(_alias_re, subject)) + r"(?!\w)", re.I)
    exact = [(m.start(), m.end()) for m in phrase.finditer(text)]
    if by_title:
        # the title heads the passage: its start and every mention of a subject word
        # there name the subject exactly
        mentions.append((0, 0))
        exact = mentions
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


def _confidence(candidates: list[Candidate], single_answer: bool) -> Confidence | None:
    """strong: a quoted candidate near an exact subject mention and more than one
    candidate; medium: two candidates, a quoted one near the subject, or the one
    candidate a one-answer question ("who wrote …") asks for; weak: one candidate."""
    quoted_near_exact = any(c.kind == QUOTED and c.near_exact for c in candidates)
    if quoted_near_exact and len(candidates) >= STRONG_MIN_CANDIDATES:
        return Confidence.STRONG
    if len(candidates) >= 2 or quoted_near_exact or (single_answer and candidates):
        return Confidence.MEDIUM
    return Confidence.WEAK if candidates else None


def is_single_answer(question: str, cue: str | None) -> bool:
    """The question asks for one item: a one-answer cue, or who/when without a plural."""
    if cue is not None:
        return cue in SINGLE_ANSWER_CUES
    toks = tokens(question)
    return bool(toks) and toks[0] in ("who", "when") and not any(t in PLURAL_THINGS for t in toks)


DEMOTION_TAIL = "evidence missed"


def demote_for_missed_evidence(
    verification: Verification, answerability: Answerability | None, policy: Policy
) -> Verification:
    """The design's opt-in follow-up (``answerability_demote_enabled``, off by default):
    a row whose answer the sidecar flagged (at or above the threshold) is labelled
    EVIDENCE-MISSED-PARTIAL and no longer STRICT. An UNGROUNDED row stays UNGROUNDED:
    nothing is below it, and its label already says the answer failed.

    docs/grounding.md, 'Answerability sidecar', decision 13.
    """
    if not policy.answerability_demote_enabled or answerability is None:
        return verification
    if verification.verdict == Verdict.UNGROUNDED:
        return verification
    return verification.model_copy(update={
        "verdict": Verdict.HYBRID,
        "label": Label.EVIDENCE_MISSED_PARTIAL,
        "tails": (*verification.tails, DEMOTION_TAIL),
    })


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
    text = answer if isinstance(answer, str) else ""
    if not denials.find_denials(text):  # most answers deny nothing: skip the rest
        return None
    shape, cue = match_extraction_shape(
        question, quantifier or classify_question_quantifier(question)
    )
    if shape is None:
        return None
    answer_type = answer_type_for(question, cue)
    denial = _denial_for(question, text, answer_type)
    if denial is None:  # only details were denied ("the release dates are not mentioned")
        return None
    subject = subject_tokens_for(question)
    if not subject:
        return None
    proximity = policy.answerability_proximity_chars
    # A candidate the answer names was not missed: "Leonardo da Vinci painted the Mona
    # Lisa [E1]. I couldn't find what it cost" lists no Leonardo.
    said = joined(tokens(text))
    candidates = [
        c
        for block in _blocks(evidence)
        for c in _block_candidates(block, subject, answer_type, proximity)
        if joined(tokens(c.text)) not in said
    ]
    confidence = _confidence(candidates, is_single_answer(question, cue))
    if confidence is None:
        return None
    if CONFIDENCE_ORDER.index(confidence) < CONFIDENCE_ORDER.index(policy.answerability_threshold):
        return None
    ordered = sorted(candidates, key=lambda c: (c.kind != QUOTED, c.evidence_rank, c.start, c.end))
    return Answerability(
        diagnostic_version=DIAGNOSTIC_VERSION,
        confidence_class=confidence,
        triggered_clauses=("denial", "extraction_shape", "candidates_in_evidence"),
        denial_pattern_matched=denial.matched,
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
