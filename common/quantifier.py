"""Quantifier preflight: which set size a question asks for.

The rules: docs/grounding.md, 'Quantifier classifier'.

``classify_question_quantifier`` maps a question onto one of ten rungs by its
lexical markers, matched case-insensitively on word boundaries after NFKC and
quote folding. When several rungs match, the highest in ``PRIORITY`` wins.

Decisions where the rules left room (each one has a test in
``tests/common/test_quantifier.py``):

* Word boundaries everywhere: "overall", "mostly", "Germany", "someone" carry
  no marker. Hyphenated compounds are not quantifiers either ("all-time",
  "all-star", "one-sided").
* "nowhere near" is an idiom for "far from", not universal negation, so it does
  not make a question ABSENT. Likewise "no longer", "no doubt", "no matter".
* "the most X" is a superlative (SINGULAR: "the most populous city"); "most" is
  PROPORTIONAL only without "the" before it ("most of", "do most birds fly").
* "how many"/"how much" not at the start is still a request for a number: it
  never counts as the MANY marker "many". "not many" is FEW, never MANY.
* "every" followed by a time unit ("every year", "every four years") is a
  frequency, not a universal. "each other", "at all", "after all", "above all"
  are not universals.
* "any" is universal only outside yes/no questions and negations and when it
  does not pick a number: "name any song by ..." and "what do any of ..." are
  ALL; "Are there any ...", "Did any ...", "which team did not win any ..."
  carry no "any" marker; "name any five rivers" is SMALL_NUM_EXPLICIT (5).
* "everyone", "everybody", "everything" count as ALL (they are universal
  quantifiers of the "every" family).
* "a couple of" names a number (2, SMALL_NUM_EXPLICIT); bare "a couple" is FEW.
  "half a dozen" is 6. "dozens of"/"hundreds of" are MANY.
* Ordinals ("the second ...", "the 3rd largest", "the 5th") give
  ``explicit_count`` 1: an ordinal asks for the one item at that rank, not for
  N items. "top 3"/"the first three"/"last 5" give the number. "a third of" is
  a fraction (PROPORTIONAL), "the 20th century" no count at all.
* A negated wh-question ("who didn't ...", "which X did not ...", "who never
  ...") keeps the wh-shape it negates: the negation narrows which items are
  asked for, it does not ask for "none". Only a universal negation (none,
  nobody, nothing, no X, ...) makes it ABSENT; "never" is one only outside a
  wh-question ("has Brazil never won ..."). "one" is a count only
  after top/name/list/give/cite/pick ("name one song"), never in "no one",
  "one of", "which one".
* Bare digits are counts only after top/first/last/best/name/list/give/cite or
  before a plural or superlative word ("5 biggest", "3 planets"); four-digit
  years (1000–2099) are never counts. A number before a unit of time or measure
  ("every four years", "5 km", "three times") is a measure, not a count.
* COMPARATIVE_BOUND reports the number as written; "between N and M" reports M.
* A question starting with an imperative "list"/"enumerate" and no other
  marker is ALL ("List the members of the Beatles").
* ``scope_bound_hint`` anchors: ``BOUNDED_ANCHORS`` below (members of a band
  or group, planets, the solar system, US states, continents, oceans, days of
  the week, months of the year, zodiac signs, a year 1000–2099, a named
  season, championship, tournament, world cup, olympics, super bowl, grand
  slam, league season, election).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from common.models import QuantifierInfo
from common.versions import CLASSIFIER_VERSION
from common.vocab import BROAD_INTENSITIES, COUNTED_INTENSITIES, Intensity

PRIORITY: tuple[Intensity, ...] = (
    Intensity.COMPREHENSIVE,
    Intensity.OPEN_REQUEST,
    Intensity.ALL,
    Intensity.MANY,
    Intensity.FEW,
    Intensity.COMPARATIVE_BOUND,
    Intensity.SMALL_NUM_EXPLICIT,
    Intensity.PROPORTIONAL,
    Intensity.ABSENT,
    Intensity.SINGULAR,
)
OPERATIONAL_SHAPES: dict[Intensity, str] = {
    Intensity.ABSENT: "universal_negation",
    Intensity.SINGULAR: "one_fact",
    Intensity.PROPORTIONAL: "fraction",
    Intensity.SMALL_NUM_EXPLICIT: "bounded_count",
    Intensity.COMPARATIVE_BOUND: "inequality_bound",
    Intensity.FEW: "small_set",
    Intensity.MANY: "medium_set",
    Intensity.ALL: "universal_enumeration",
    Intensity.COMPREHENSIVE: "exhaustive",
    Intensity.OPEN_REQUEST: "open_enumeration",
}

NUMBER_WORDS: dict[str, int] = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
}
_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_UNITS = "one|two|three|four|five|six|seven|eight|nine"
# "twenty-five", "twenty five", "seven", "12" (never a year: at most three digits)
_NUM = (
    rf"(?:(?:{_TENS})(?:[- ](?:{_UNITS}))?|"
    r"eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|"
    rf"{_UNITS}|ten|hundred|a hundred|\d{{1,3}}(?:,\d{{3}})*)"
)
_ORDINAL_WORDS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last"
_NUM_NO_ONE = _NUM.replace("|one|", "|").replace("(?:one|", "(?:")
_COUNT_VERBS = r"(?:top|first|last|best|worst|name|list|give|cite|pick|mention|enumerate|provide|choose|select)"
_TIME_UNITS = r"(?:second|minute|hour|day|night|week|weekend|month|year|decade|century|centurie|time|season|summer|winter|spring|autumn|morning|evening)s?"
# A number before a unit is a measure, not a count of items ("four years", "5 km").
_UNITS_OF_MEASURE = (
    _TIME_UNITS
    + r"|km|kilometres?|kilometers?|miles?|metres?|meters?|feet|foot|inches|kg|kilograms?"
    + r"|pounds?|tons?|tonnes?|degrees?|percent|dollars?|euros?|times|people|persons"
)
_PLURAL_OR_SUPERLATIVE = rf"(?!(?:{_UNITS_OF_MEASURE})\b)[a-z]+(?:s|est)\b"


def parse_number(text: str) -> int | None:
    """A digit string or number word(s) → int; None when it is not a number."""
    t = text.strip().replace(",", "")
    if t.isdigit():
        return int(t)
    t = t.removeprefix("a ").strip()
    parts = re.split(r"[- ]", t)
    if all(p in NUMBER_WORDS for p in parts) and parts:
        return sum(NUMBER_WORDS[p] for p in parts)
    return None


@dataclass(frozen=True)
class Marker:
    """One lexical surface of a rung; ``count`` extracts the explicit count if any."""

    rung: Intensity
    pattern: re.Pattern[str]
    count: Callable[[re.Match[str]], int | None] | None = None


def _fixed(value: int) -> Callable[[re.Match[str]], int | None]:
    return lambda _m: value


def _group(name: str) -> Callable[[re.Match[str]], int | None]:
    return lambda m: parse_number(m[name])


def _m(
    rung: Intensity, pattern: str, count: Callable[[re.Match[str]], int | None] | None = None
) -> Marker:
    return Marker(rung, re.compile(pattern), count)


# Boundaries: letters, digits, apostrophes and hyphens join words, so "all-time"
# and "don't" are never split into a marker.
_B = r"(?<![\w'-])"
_WH_START = r"^(?!\W*(?:which|what|who|whom|whose|where|when|why|how)\b)"
_E = r"(?![\w'-])"

MARKERS: tuple[Marker, ...] = (
    # COMPREHENSIVE
    *(
        _m(Intensity.COMPREHENSIVE, _B + s + _E)
        for s in (
            "comprehensive",
            r"complete (?:list|inventory|catalog(?:ue)?|overview|account|history|guide)",
            r"full list",
            "exhaustive",
            "exhaustively",
            "definitive",
            r"everything (?:you|that you) know",
            r"tell me everything",
            r"all there is to know",
            r"the whole story",
            r"the full (?:picture|story)",
            r"from a to z",
        )
    ),
    # OPEN_REQUEST
    *(
        _m(Intensity.OPEN_REQUEST, _B + s + _E)
        for s in (
            r"tell me (?:all )?about",
            "describe",
            "explain",
            r"summari[sz]e",
            r"give (?:me )?an overview of",
            r"an overview of",
            r"walk me through",
            r"what about",
            "discuss",
            r"elaborate on",
            r"expound (?:on|upon)",
        )
    ),
    # ALL: list verbs + all/every first so the matched token names the verb.
    _m(Intensity.ALL, _B + r"(?:list|name|enumerate|cite) (?:all|every)" + _E),
    _m(Intensity.ALL, _B + r"each and every" + _E),
    _m(Intensity.ALL, _B + r"every single" + _E),
    _m(Intensity.ALL, _B + r"the (?:entirety|totality) of" + _E),
    _m(Intensity.ALL, _B + r"the whole" + _E),
    _m(
        Intensity.ALL,
        r"(?<!\bat )(?<!\bafter )(?<!\babove )" + _B + r"all" + _E + r"(?! of a sudden)",
    ),
    _m(Intensity.ALL, _B + r"every" + _E + rf"(?! (?:other |{_NUM} )?{_TIME_UNITS}\b)(?! other\b)"),
    _m(Intensity.ALL, _B + r"(?:everyone|everybody|everything)" + _E),
    _m(Intensity.ALL, _B + r"each" + _E + r"(?! other\b)"),
    _m(Intensity.ALL, _B + r"(?:whatever|whoever|whichever)" + _E),
    # "any" is universal unless the question is yes/no, the "any" is negated or
    # it picks a number ("any five" is SMALL_NUM_EXPLICIT).
    _m(
        Intensity.ALL,
        r"^(?!(?:is|are|was|were|do|does|did|has|have|had|can|could|will|would|should|shall|may|might|must)\b)"
        r"(?!.*(?:\b(?:not|never|without|hardly|if|no|nor|neither)\b|n't).*\bany\b)"
        r".*?" + _B + r"any" + _E + rf"(?! (?:more|longer)\b)(?! {_NUM}{_E})",
    ),
    # MANY ("how many" is a request for a number; "not many" is FEW)
    *(
        _m(Intensity.MANY, _B + s + _E)
        for s in (
            r"a great many",
            r"several dozen",
            r"multitudes of",
            r"(?<!how )(?<!not )(?<!so )(?<!too )(?<!as )many",
            "various",
            "multiple",
            "numerous",
            r"a (?:large |great )?number of",
            r"lots of",
            r"a lot of",
            r"plenty of",
            r"dozens of",
            r"hundreds of",
            r"thousands of",
        )
    ),
    # FEW
    *(
        _m(Intensity.FEW, _B + s + _E)
        for s in (
            r"some",
            r"a few",
            "several",
            r"a couple(?! of)",
            r"a small number of",
            r"not many",
            r"hardly any",
            r"a handful(?! of)",
            r"a smattering of",
        )
    ),
    # COMPARATIVE_BOUND
    _m(
        Intensity.COMPARATIVE_BOUND,
        _B + rf"between (?P<lo>{_NUM}) and (?P<n>{_NUM})" + _E,
        _group("n"),
    ),
    _m(
        Intensity.COMPARATIVE_BOUND,
        _B
        + r"(?:at least|at most|no more than|no fewer than|no less than|not more than|"
        + r"more than|fewer than|less than|under|over|up to|upwards of|a maximum of|a minimum of)"
        + rf" (?P<n>{_NUM})"
        + _E,
        _group("n"),
    ),
    # SMALL_NUM_EXPLICIT
    _m(Intensity.SMALL_NUM_EXPLICIT, _B + r"half a dozen" + _E, _fixed(6)),
    _m(Intensity.SMALL_NUM_EXPLICIT, _B + r"(?:a )?dozen" + _E, _fixed(12)),
    _m(Intensity.SMALL_NUM_EXPLICIT, _B + r"a handful of" + _E, _fixed(5)),
    _m(Intensity.SMALL_NUM_EXPLICIT, _B + r"(?:a )?(?:pair|couple) of" + _E, _fixed(2)),
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        _B + rf"(?:first|last|top|final|next|previous) (?P<n>{_NUM})" + _E,
        _group("n"),
    ),
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        _B + rf"{_COUNT_VERBS} (?:the )?(?P<n>{_NUM})" + _E,
        _group("n"),
    ),
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        r"(?<!every )" + _B + rf"(?P<n>{_NUM_NO_ONE}) {_PLURAL_OR_SUPERLATIVE}",
        _group("n"),
    ),
    # An ordinal asks for the one item at that rank; "a third of" is a fraction.
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        r"(?<!\ba )(?<!\bone )(?<!\btwo )"
        + _B
        + rf"(?:{_ORDINAL_WORDS}|\d{{1,3}}(?:st|nd|rd|th))"
        + _E
        + r"(?!-)(?! (?:century|centuries|millennium)\b)",
        _fixed(1),
    ),
    # PROPORTIONAL ("the most X" is a superlative, not a fraction)
    *(
        _m(Intensity.PROPORTIONAL, _B + s + _E)
        for s in (
            r"(?<!the )(?<!at )most",
            r"(?:the )?majority of",
            r"(?:a |the )?minority of",
            r"half",
            r"a (?:third|quarter|fifth) of",
            r"(?:one|two) (?:third|thirds|quarter|quarters) of",
            r"\d+(?:\.\d+)? ?(?:%|percent|per cent) of",
            r"the bulk of",
            r"the lion's share of",
            r"a fraction of",
        )
    ),
    # ABSENT
    *(
        _m(Intensity.ABSENT, _B + s + _E)
        for s in (
            "none",
            "nothing",
            "nobody",
            r"no one",
            r"nowhere(?! near)",
            "neither",
            r"not a single",
            r"not one",
            "zero",
            r"no(?! (?:longer|doubt|matter|more|less|fewer|sooner|later)\b)(?= \w)",
        )
    ),
    # "never" negates the verb of a wh-question ("who never won ...") and keeps its shape;
    # elsewhere it is a universal negation over time ("has Brazil never won ...").
    _m(Intensity.ABSENT, _WH_START + r".*?" + _B + "never" + _E),
    # SINGULAR surfaces (the default when nothing else matches)
    *(
        _m(Intensity.SINGULAR, _B + s + _E)
        for s in (
            r"what (?:is|was|are|were)",
            r"who (?:is|was|are|were)",
            r"which(?= \w)",
            r"whom",
            r"whose",
            r"name the",
            r"identify the",
            r"the(?= \w)",
        )
    ),
)

_HOW_MANY_RE = re.compile(r"^\W*(?:(?:and|but|so)\W+)?(?P<token>how (?:many|much))\b")
_LIST_IMPERATIVE_RE = re.compile(r"^\W*(?:please\W+)?(?:list|enumerate)\b")
_FOLD = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})

BOUNDED_ANCHORS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(_B + p + _E)
    for p in (
        r"(?:band |founding |original |group |crew |cast |team )?members of",
        r"(?:band|founding|original|crew|cast|team) members",
        r"members?",  # "every member of ABBA" names the same finite set
        r"planets?",
        r"(?:the )?solar system",
        r"(?:u\.?s\.?|us|american|united states) states?",
        r"states (?:of|in) (?:the )?(?:u\.?s\.?a?|usa|america|united states)",
        r"continents?",
        r"oceans?",
        r"days of the week",
        r"months of the year",
        r"(?:zodiac signs?|signs? of the zodiac)",
        r"(?:1[0-9]{3}|20[0-9]{2})",
        r"(?:19|20)\d{2}[-/](?:\d{2}|\d{4})",
        r"season",
        r"championships?",
        r"tournament",
        r"world cup",
        r"olympics|olympic games",
        r"super bowl",
        r"grand slam",
        r"(?:general |presidential )?election",
    )
)


def _normalize_question(question: str) -> str:
    text = unicodedata.normalize("NFKC", question).casefold().translate(_FOLD)
    return " ".join(text.split())


def _scope_hint(text: str, is_broad: bool) -> str:
    if not is_broad:
        return "unknown"
    return "bounded" if any(p.search(text) for p in BOUNDED_ANCHORS) else "unbounded"


def _first_match_per_rung(text: str) -> dict[Intensity, tuple[Marker, re.Match[str]]]:
    """The earliest match of each rung (the first marker listed wins ties)."""
    found: dict[Intensity, tuple[Marker, re.Match[str]]] = {}
    for marker in MARKERS:
        match = marker.pattern.search(text)
        if match is None:
            continue
        best = found.get(marker.rung)
        if best is None or match.start() < best[1].start():
            found[marker.rung] = (marker, match)
    return found


def _matched_text(marker: Marker, match: re.Match[str]) -> str:
    if marker.rung == Intensity.ABSENT and match.group(0).endswith("never"):
        return "never"
    if marker.rung == Intensity.ALL and match.group(0).endswith("any") and match.start() == 0:
        return "any"
    return match.group(0)


def classify_question_quantifier(question: str) -> QuantifierInfo:
    """Classify a question's quantifier (docs/grounding.md, 'Quantifier classifier')."""
    text = _normalize_question(question)
    intensity, token, count = Intensity.SINGULAR, None, None
    how_many = _HOW_MANY_RE.search(text)
    if how_many:
        token = how_many["token"]
    else:
        found = _first_match_per_rung(text)
        rung = next((r for r in PRIORITY if r in found), None)
        if rung == Intensity.SINGULAR or rung is None:
            listing = _LIST_IMPERATIVE_RE.search(text)
            if listing:
                found[Intensity.ALL] = (Marker(Intensity.ALL, _LIST_IMPERATIVE_RE), listing)
                rung = Intensity.ALL
        if rung is not None:
            marker, match = found[rung]
            intensity, token = rung, _matched_text(marker, match).strip(" ,.;:!?\"'")
            if marker.count is not None:
                count = marker.count(match)
    is_broad = intensity in BROAD_INTENSITIES
    if intensity not in COUNTED_INTENSITIES:
        count = None
    return QuantifierInfo(
        intensity=intensity,
        matched_token=token or None,
        explicit_count=count,
        is_broad=is_broad,
        operational_shape=OPERATIONAL_SHAPES[intensity],
        scope_bound_hint=_scope_hint(text, is_broad),
        classifier_version=CLASSIFIER_VERSION,
    )
