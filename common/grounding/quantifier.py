"""Quantifier preflight: which set size a question asks for.

The rules: docs/grounding.md, 'Quantifier classifier'.

``classify_question_quantifier`` maps a question onto one of ten rungs by its
lexical markers, matched case-insensitively on word boundaries after NFKC and
quote folding. When several rungs match, the highest in ``PRIORITY`` wins.
Names come first: a title, quoted span or capitalised span whose own words hold
a marker ("Who wrote All Quiet on the Western Front?") is hidden from the
markers (``qfarm.common.grounding.names``; the corpus's titles are handed in by
the caller, since this module does no I/O).

Decisions where the rules left room (each one has a test in
``tests/common/grounding/test_quantifier.py``):

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
from functools import lru_cache

from qfarm.common.grounding.gates import GatedPatterns
from qfarm.common.grounding.names import (
    PLACEHOLDER,
    TitleSet,
    find_name_spans,
    fold_question,
    replace_spans,
)
from qfarm.common.models import QuantifierInfo
from qfarm.common.versions import CLASSIFIER_VERSION
from qfarm.common.vocab import BROAD_INTENSITIES, COUNTED_INTENSITIES, Intensity

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
_SUPERLATIVE = r"[a-z]+est\b"
# A fraction ("two thirds of") is a share, not a count of thirds.
_FRACTION_NOUNS = r"halves|thirds|quarters|fourths|fifths|sixths|sevenths|eighths|ninths|tenths"
# Letters of any script: "the three Brontë sisters" is three sisters.
_LETTERS = r"[^\W\d_]"
_PLURAL_NOUN = (
    rf"(?:(?!(?:{_UNITS_OF_MEASURE}|{_FRACTION_NOUNS})\b){_LETTERS}+s|men|women|children|people|geese|mice)\b"
)
_FUNCTION_WORDS = (
    "of|the|and|or|in|on|at|to|for|by|with|from|a|an|is|are|was|were|did|do|does|has|have|had"
    "|that|which|who|than|as|into|over|under|after|before|since|ago"
)
# A word that can stand between a number and its noun ("three *primary* colours").
_MODIFIER = rf"(?!(?:{_FUNCTION_WORDS}|{_UNITS_OF_MEASURE})\b){_LETTERS}+(?:-{_LETTERS}+)?"
_HEDGES = (
    r"about|around|roughly|approximately|approx\.?|some|circa|nearly|almost|close to"
    r"|more or less|give or take|somewhere around|in the region of|on the order of"
)
# Words after which a number heads the noun phrase a question asks for.
_COUNT_HEAD = (
    r"(?:(?<=\bthe )|(?<=\bare )|(?<=\bwere )|(?<=\bwhich )|(?<=\bwhat )|(?<=\bname )"
    r"|(?<=\blist )|(?<=\bgive )|(?<=\bme )|(?<=\bthese )|(?<=\bthose )|(?<='s )|(?<=\bits )"
    r"|(?<=\btheir )|(?<=\bhis )|(?<=\bher )|(?<=\bsuggest )|(?<=\brecommend )|(?<=\bpick ))"
)
# Words after which an ordinal names a rank ("the first", "Henry's second", "its 3rd").
_DETERMINER_BEFORE = (
    r"(?:(?<=\bthe )|(?<=\bhis )|(?<=\bher )|(?<=\bits )|(?<=\btheir )|(?<=\bour )"
    r"|(?<=\bmy )|(?<=\byour )|(?<=\bwhose )|(?<='s )|(?<=s' ))"
)


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

# Colloquial and imperative surfaces are not listed phrase by phrase: each rung's
# surfaces are the product of a few small word classes (quantifier word × noun
# frame × verb frame), so a new word joins every frame it fits at once.
# The start of the question or of a sentence in it (not after a comma: "capture,
# manage, and present data" lists verbs, it does not command).
_ANY_START = r"(?:^\W*|[.;:!?]\W*)"
# An imperative at the start of a clause, optionally softened ("please", "can you").
_IMPERATIVE = (
    _ANY_START
    + r"(?:(?:please|kindly|now|ok|okay|so|and)\W+)?"
    + r"(?:(?:can|could|would|will) you\W+(?:please\W+)?|(?:i'd|i would) like you to\W+"
    + r"|i want you to\W+|help me\W+)?(?:please\W+)?"
)
# MANY: a plural quantity noun + "of" ("loads of"), a singular collective noun after
# "a" + "of" ("a slew of"), or a determiner adjective ("countless", "umpteen").
_MANY_PLURAL_NOUNS = (
    "lots loads tons heaps piles stacks masses oodles bags scores dozens hundreds thousands "
    "millions multitudes reams hordes droves zillions gazillions bajillions umpteens scads gobs "
    "bucketloads truckloads boatloads shedloads shiploads cartloads wagonloads"
).split()
_MANY_COLLECTIVE_NOUNS = (
    "lot load ton heap pile stack mass bunch host slew raft wealth multitude plethora myriad "
    "array range variety number abundance profusion panoply legion throng swathe battery "
    "assortment smorgasbord bucketload truckload boatload shedload shipload cartload wagonload"
).split()
_MANY_SIZE_ADJECTIVES = "great|good|large|huge|vast|wide|whole|fair|big|broad|long|massive|enormous"
_MANY_DETERMINERS = (
    "many various multiple numerous countless umpteen innumerable myriad untold sundry "
    "manifold uncountable numberless"
).split()
_MANY_PHRASES = (
    "quite a few",
    "not a few",
    "more than a few",
    "a good few",
    "a fair few",
    "a great many",
    "a good many",
    "no end of",
    "plenty of",
    "several dozen",
)
# COMPREHENSIVE: a totality adjective × an account noun ("the complete roster", "the
# entire picture"), or a verb frame asking for everything ("leave nothing out").
_TOTALITY_ADJECTIVES = (
    "complete full entire whole exhaustive comprehensive thorough all-inclusive definitive "
    "unabridged"
).split()
_ACCOUNT_NOUNS = (
    "list listing roster lineup line-up inventory catalog catalogue rundown run-down register "
    "index tally record account history story picture overview breakdown survey census "
    "compendium directory discography filmography bibliography chronology timeline works "
    "details lowdown low-down canon oeuvre output rollcall roll-call set"
).split() + ["body of work"]
_EVERYTHING_FRAMES = (
    r"(?:tell|give|show|teach) (?:me|us) everything",
    r"everything (?:you|that you|there is to|one could|i should) (?:know|need to know|can tell)",
    r"all (?:there is|that there is) to know",
    r"(?:leave|leaving) (?:nothing|no detail|nobody|no one) out",
    r"(?:do not|don't) leave (?:anything|anyone|anybody) out",
    r"spare no detail",
    r"every (?:last |single )?(?:detail|thing|one of them|aspect|fact)",
    r"(?:absolutely|literally|simply|just about|pretty much) everything",
    r"in (?:full|exhaustive|complete|every) detail",
    r"chapter and verse",
    r"from (?:a to z|start to finish|beginning to end|top to bottom|soup to nuts)",
    r"the a to z",
    r"(?:the|a) (?:whole|full|complete|entire) (?:shebang|enchilada|nine yards|kit and caboodle)",
)
# OPEN_REQUEST: a guiding verb × an object pronoun × a particle ("talk me through",
# "fill us in on"), a verb + particle in an imperative ("sum up", "break down"), a
# bare imperative verb ("outline", "recap"), "give me an X of", or a question frame.
_GUIDE_VERBS = "talk|walk|take|run|guide|lead|step|bring"
_TELL_VERBS = "tell|teach|fill|brief|enlighten|inform|educate|school|update"
_PARTICLE_VERBS = (
    r"sum (?:(?:it|this|that|things|them) )?up",
    r"wrap (?:(?:it|this|that|things) )?up",
    r"break (?:(?:it|this|that) )?down",
    r"lay (?:(?:it|this|that) )?out",
    r"spell (?:(?:it|this|that) )?out",
    r"flesh (?:(?:it|this|that) )?out",
    r"map (?:(?:it|this|that) )?out",
    r"go over",
    r"run (?:me |us )?through",
    r"fill (?:me|us) in",
    r"paint (?:me |us )?a picture of",
    r"shed (?:some )?light on",
    # "what did Churchill talk about?" and "did Darwin comment on it?" ask for a fact
    r"(?:talk|speak) (?:to me |to us )?about",
    r"(?:expand|reflect|comment|dwell) (?:on|upon)",
)
_IMPERATIVE_VERBS = (
    "outline recap recount review introduce overview characterize characterise profile explore "
    "unpack chronicle narrate detail cover present sketch survey portray"
).split()
_OVERVIEW_NOUNS = (
    "overview rundown run-down summary outline introduction primer sketch lowdown low-down "
    "synopsis recap background account picture tour precis digest"
).split()
_OPEN_QUESTION_FRAMES = (
    r"what (?:can|could) you (?:tell|say to) (?:me|us) about",
    r"what (?:do|does) (?:you|one) know about",
    r"what is there to know about",
    r"what's the (?:story|deal|lowdown) (?:with|of|behind|on)",
    r"what is the (?:story|deal) (?:with|of|behind)",
    r"(?:i'd|i would|we'd|we would) (?:like|love) to (?:know|hear|learn) (?:more )?about",
    r"i (?:want|need) to (?:know|hear|learn) (?:more )?about",
    r"let's (?:talk|chat|hear) about",
    r"tell us about",
    r"(?:share|tell me|say) what (?:you|one) know(?:s)? about",
    r"(?:catch|bring) (?:me|us) up (?:on|with)",
    r"help (?:me|us) (?:understand|make sense of|get to know|learn about)",
)


def _alt(words: list[str] | tuple[str, ...]) -> str:
    return "(?:" + "|".join(sorted(words, key=len, reverse=True)) + ")"


_MANY_SURFACES: tuple[str, ...] = (
    # never after "the"/"their"/a number: "the scores of the final", "5 tons of steel"
    r"(?<!\bthe )(?<!\btheir )(?<!\d )(?<!how )" + _alt(_MANY_PLURAL_NOUNS) + r" of",
    rf"an? (?:(?:{_MANY_SIZE_ADJECTIVES}) )?" + _alt(_MANY_COLLECTIVE_NOUNS) + r" of",
    _alt(_MANY_PHRASES),
    r"(?<!how )(?<!not )(?<!so )(?<!too )(?<!as )" + _alt(_MANY_DETERMINERS),
)
_COMPREHENSIVE_SURFACES: tuple[str, ...] = (
    "comprehensive",
    "exhaustive",
    "exhaustively",
    "definitive",
    _alt(_TOTALITY_ADJECTIVES) + r" (?:[a-z'-]+ )?" + _alt(_ACCOUNT_NOUNS),
    *_EVERYTHING_FRAMES,
)
_OPEN_REQUEST_SURFACES: tuple[str, ...] = (
    rf"(?:{_GUIDE_VERBS}) (?:me|us|them) (?:through|over)",
    rf"(?:{_TELL_VERBS}) (?:me|us) (?:all |more |a bit |a little )?(?:in )?(?:about|on)",
    r"tell (?:me|us) (?:all )?about",
    "describe",
    "explain",
    r"summari[sz]e",
    r"(?:give|offer|provide|show) (?:me |us )?(?:an?|the|some|a quick|a brief|a short) "
    + r"(?:(?:quick|brief|short|general|broad|rough|high-level) )?"
    + _alt(_OVERVIEW_NOUNS)
    + r" (?:of|on|about|for)",
    r"an overview of",
    r"what about",
    "discuss",
    r"(?:elaborate|expound) (?:on|upon)",
    *_OPEN_QUESTION_FRAMES,
)
_OPEN_IMPERATIVES: tuple[str, ...] = (
    *_PARTICLE_VERBS,
    _alt(_IMPERATIVE_VERBS),
)

MARKERS: tuple[Marker, ...] = (
    # COMPREHENSIVE
    *(_m(Intensity.COMPREHENSIVE, _B + s + _E) for s in _COMPREHENSIVE_SURFACES),
    # OPEN_REQUEST (a phrasal verb or bare verb counts only as an imperative:
    # "why did the talks break down?" asks for one fact)
    *(_m(Intensity.OPEN_REQUEST, _B + s + _E) for s in _OPEN_REQUEST_SURFACES),
    *(_m(Intensity.OPEN_REQUEST, _IMPERATIVE + f"(?P<tok>{s})" + _E) for s in _OPEN_IMPERATIVES),
    # ALL: list verbs + all/every first so the matched token names the verb.
    _m(Intensity.ALL, _B + r"(?:list|name|enumerate|cite) (?:all|every)" + _E),
    _m(Intensity.ALL, _B + r"each and every" + _E),
    _m(Intensity.ALL, _B + r"every single" + _E),
    _m(Intensity.ALL, _B + r"the (?:entirety|totality) of" + _E),
    _m(Intensity.ALL, _B + r"the whole" + _E),
    # Idioms that hold "all" but quantify nothing: "the best albums of all time", "first
    # of all", "all along", "all but forgotten", "once and for all".
    _m(
        Intensity.ALL,
        r"(?<!\bat )(?<!\bafter )(?<!\babove )(?<!\bfirst of )(?<!\band for )(?<!\ball in )"
        + _B
        + r"all"
        + _E
        + r"(?! of a sudden)(?! times?\b)(?! along\b)(?! but\b)(?! right\b)(?! in all\b)"
        + r"(?! the same\b)(?! the while\b)",
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
    *(_m(Intensity.MANY, _B + s + _E) for s in _MANY_SURFACES),
    # FEW
    *(
        _m(Intensity.FEW, _B + s + _E)
        for s in (
            rf"some(?! (?:{_NUM}){_E})",
            r"(?<!quite )(?<!not )(?<!good )(?<!fair )(?<!than )a few",
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
    # "both parents of ...", "both of them": two; "both a poet and a painter" joins, not counts
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        _B
        + r"both(?: of)?(?: (?:the|his|her|its|their|these|those|my|your|our))?"
        + rf" (?:(?:{_MODIFIER}) )?(?:{_PLURAL_NOUN}|them\b|us\b)",
        _fixed(2),
    ),
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
        r"(?<!every )" + _B + rf"(?P<n>{_NUM_NO_ONE}) (?:{_PLURAL_NOUN}|{_SUPERLATIVE})",
        _group("n"),
    ),
    # "the three primary colours", "name four fundamental forces": up to two modifiers
    # between the number and its noun when the number heads the noun phrase asked for;
    # after a preposition or a verb ("divided into two identical cells") it describes
    # the thing asked for, not how many are wanted.
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        rf"(?:^\W*|{_COUNT_HEAD})"
        + rf"(?P<n>{_NUM_NO_ONE}) (?:{_MODIFIER} ){{1,2}}(?:{_PLURAL_NOUN}|{_SUPERLATIVE})",
        _group("n"),
    ),
    # A hedged number is still the number asked for ("about five", "ten or so").
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        _B + rf"(?:{_HEDGES}) (?P<n>{_NUM_NO_ONE}){_E}(?! (?:{_MODIFIER} )?(?:{_UNITS_OF_MEASURE})\b)",
        _group("n"),
    ),
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        _B + rf"(?P<n>{_NUM_NO_ONE}) or so" + _E,
        _group("n"),
    ),
    # An ordinal asks for the one item at that rank; "a third of" is a fraction. Only
    # after a determiner: "Who first reached the summit?" uses "first" as an adverb
    # and asks for one fact, not for an ordinal list of one.
    _m(
        Intensity.SMALL_NUM_EXPLICIT,
        _DETERMINER_BEFORE
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
    # A negated "which X" asks for the members of X the predicate does not hold for,
    # and the design's table puts it under ABSENT ("which teams did not win ..."); a
    # negated who/what keeps its wh-shape (below, and the SINGULAR default).
    _m(
        Intensity.ABSENT,
        r"^\W*(?:(?:in|of|at|for|from|on|to|by|with|during|under|among|between|and|but|so) )?"
        r"which\b(?!.*\bnot (?:only|just|merely)\b).*?(?P<tok>\bnot\b|n't\b|\bnever\b|\bcannot\b)",
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

# "all three", "all of the 50", "every one of the seven", "each of the twelve": a
# universal over a set whose size the question states.
_ALL_N_RE = re.compile(
    _B
    + r"(?:all|every one|each one|each|both|every last one)(?: of)?(?: the| these| those| its| their| his| her)?"
    + rf" (?P<n>{_NUM_NO_ONE}){_E}(?! (?:{_UNITS_OF_MEASURE})\b)(?! (?:of )?(?:a|an|the)? ?(?:time|sudden)\b)"
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
        # sets whose size is fixed and well known
        r"(?:u\.?s\.?|us|american|united states) presidents?",
        r"presidents? of (?:the )?(?:u\.?s\.?a?|usa|america|united states)",
        r"founding fathers",
        r"apostles|disciples",
        r"wives of",
        r"great lakes",
        r"noble gases",
        r"primary colou?rs",
        r"(?:seven )?wonders of the (?:ancient )?world",
        r"books of the (?:bible|old testament|new testament|torah)",
        r"(?:provinces|territories) of canada|states of australia|canadian provinces",
        r"(?:chemical )?elements of the periodic table|periodic table",
        r"(?:the )?(?:twelve |12 )?olympians|olympian gods",
        r"(?:the )?(?:seven )?deadly sins",
        r"(?:the )?(?:ten )?commandments",
        r"(?:the )?(?:nine )?muses",
        r"(?:the )?(?:eight )?(?:immortals|trigrams)",
        r"seasons of the year|(?:the )?four seasons",
        r"(?:the )?(?:four )?fundamental forces",
        r"(?:the )?(?:four )?gospels",
        r"colou?rs of the rainbow",
        r"(?:the )?(?:five )?senses",
        r"(?:the )?(?:five )?boroughs",
        r"(?:the )?(?:chess )?pieces",
        r"(?:the )?(?:g7|g8|g20) (?:members|countries|nations)",
        r"(?:the )?permanent members",
    )
)


# Chat spellings of "you"/"your" ("everything u know about the aztecs"); "u.s." stays.
_CHAT_WORDS = {"u": "you", "ya": "you", "ur": "your"}
_CHAT_RE = re.compile(r"(?<![\w.'-])(?:u|ya|ur)(?![\w.'-])")
# A universal over a named set ("each of the Teenage Mutant Ninja Turtles", "all the
# Marx Brothers", "every Harry Potter book") is over that set's members: bounded.
_NAMED_SET_RE = re.compile(
    _B + r"(?:all|every|each|every one|each one)(?: of)?(?: the| these| those)? " + PLACEHOLDER + _E
)
# A name whose own words carry a marker hides it from the question, except a number
# of two or more: "the Five Pillars of Islam" are five. A rank in a name ("The Last
# Supper", "The Seventh Seal") is part of the name, and would cap the answer at one.
_NAME_KEEPS = frozenset({Intensity.SINGULAR, *COUNTED_INTENSITIES})


def _normalize_question(question: str) -> str:
    text = unicodedata.normalize("NFKC", question).casefold().translate(_FOLD)
    text = " ".join(text.split())
    return _CHAT_RE.sub(lambda m: _CHAT_WORDS[m.group(0)], text)


def _scope_hint(text: str, named: str, is_broad: bool, count: int | None) -> str:
    if not is_broad:
        return "unknown"
    if count is not None:  # "all three ...": the question states the set's size
        return "bounded"
    if _NAMED_SET_RE.search(named):
        return "bounded"
    return "bounded" if any(p.search(text) for p in BOUNDED_ANCHORS) else "unbounded"


# Each marker runs only on a text holding one of the words it must match (most questions
# hold the words of a few dozen of the markers).
_GATED_MARKERS = GatedPatterns(m.pattern for m in MARKERS)


def _first_match_per_rung(text: str) -> dict[Intensity, tuple[Marker, re.Match[str]]]:
    """The earliest match of each rung (the first marker listed wins ties)."""
    found: dict[Intensity, tuple[Marker, re.Match[str]]] = {}
    for i in _GATED_MARKERS.candidates(text):
        marker = MARKERS[i]
        match = marker.pattern.search(text)
        if match is None:
            continue
        best = found.get(marker.rung)
        if best is None or match.start() < best[1].start():
            found[marker.rung] = (marker, match)
    return found


def _matched_text(marker: Marker, match: re.Match[str]) -> str:
    if "tok" in match.re.groupindex and match["tok"] is not None:
        return match["tok"]
    if marker.rung == Intensity.ABSENT and match.group(0).endswith("never"):
        return "never"
    if marker.rung == Intensity.ALL and match.group(0).endswith("any") and match.start() == 0:
        return "any"
    return match.group(0)


@lru_cache(maxsize=4096)
def _classify_text(text: str) -> tuple[Intensity, str | None, int | None]:
    """Rung, matched words and count of a normalized text, names not considered."""
    intensity, token, count = Intensity.SINGULAR, None, None
    how_many = _HOW_MANY_RE.search(text)
    if how_many:
        return intensity, how_many["token"], None
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
    if intensity == Intensity.ALL:
        # "name all three ...", "list all 50 ...": the set's own size, and the cap
        finite = _ALL_N_RE.search(text)
        count = parse_number(finite["n"]) if finite else None
    elif intensity not in COUNTED_INTENSITIES:
        count = None
    return intensity, token, count


def _hides_marker(name: str) -> bool:
    rung, _token, count = _classify_text(_normalize_question(name))
    return rung not in _NAME_KEEPS or (rung in COUNTED_INTENSITIES and count == 1)


# Memoised (the result is frozen): the preflight and the sidecar of every job classify
# their question, and the modes and samples of a question ask again; each call runs
# over a hundred patterns.
@lru_cache(maxsize=4096)
def classify_question_quantifier(question: str, titles: TitleSet | None = None) -> QuantifierInfo:
    """Classify a question's quantifier (docs/grounding.md, 'Quantifier classifier').

    ``titles``, the corpus's own titles, lets a title written in lower case count as a
    name; without it, quoted and capitalised spans still do.
    """
    folded = fold_question(question)
    names = find_name_spans(folded, titles)
    hiding = [n for n in names if _hides_marker(folded[n.start : n.end])]
    intensity, token, count = _classify_text(_normalize_question(replace_spans(folded, hiding)))
    is_broad = intensity in BROAD_INTENSITIES
    named = _normalize_question(replace_spans(folded, names)) if names else ""
    return QuantifierInfo(
        intensity=intensity,
        matched_token=token or None,
        explicit_count=count,
        is_broad=is_broad,
        operational_shape=OPERATIONAL_SHAPES[intensity],
        scope_bound_hint=_scope_hint(_normalize_question(question), named, is_broad, count),
        classifier_version=CLASSIFIER_VERSION,
    )
