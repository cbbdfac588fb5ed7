"""Clause A of the answerability sidecar: does an answer deny that the evidence holds the answer?

The rules: docs/grounding.md, 'Answerability sidecar' (decision 7 lists the
grammar's families).

A denial is built from a small grammar, not a list of phrasings:

    negation (or a negative adjective)  ×  reporting verb or state  ×  object

written out as families (``FAMILIES``: actives with a source subject,
passives, states, first-person inability, existentials, impersonal modals …),
each a regular expression assembled from the word tables below. Adding a word
to a table adds it to every family it fits: a verb added to ``REPORT_VERBS``
with its forms gives the active ("the passages do not <verb> …"), the passive
("… is not <participle>") and the appear/seem forms ("does not appear to
<verb>") at once. When a real model's answers show a denial that slips
through, the fix is a word in a table, or at worst a family, plus an example
in the tests.

Each family says where its *object* is: after the match (actives: "the
evidence does not list <her songs>") or before it (passives and states: "<the
release dates> are not mentioned"). The object decides whether the denial is
of the answer or of a detail (``is_partial``): "the release dates are not
mentioned", "it does not say when it was published", "no specific chart
positions are given" deny a date or a number, not the songs asked for, and so
are no denial of the answer unless the question asks for that kind of detail.

Decisions:

* A participle or adjective that only describes a text ("mentioned",
  "stated", "specified", "unclear", "unstated") is a denial on its own; one
  that can describe the world ("listed", "found", "known", "unknown",
  "missing") needs a place in the sources ("in the passages", "from the
  evidence", "anywhere", "here"): "his first novel was not listed among the
  bestsellers" and "the author is unknown" are facts, not denials.
* A first-person inability ("I could not find", "we were unable to
  determine") is a denial; a third-person one ("he could not find a
  publisher") is a fact about the subject.
* "not only", "not just", "not until" negate nothing here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qfarm.common.grounding.gates import GatedPatterns
from qfarm.common.grounding.verify.text import normalize

# ---------------------------------------------------------------- word tables

SOURCE_NOUNS: tuple[str, ...] = (
    "evidence", "evidence blocks", "passages", "passage", "text", "texts", "provided text",
    "context", "documents", "document", "sources", "source", "excerpts", "excerpt", "extracts",
    "article", "articles", "material", "materials", "information", "blocks", "snippets",
    "records", "data", "search results", "results", "references", "entries", "entry", "page",
    "pages", "e\\d+", "\\[e\\d+\\]",
)  # fmt: skip
# "it does not say …": a pronoun is a source only with a verb that reports ("it does
# not include a happy ending" is about a novel, not the evidence).
PRONOUN_SOURCES: tuple[str, ...] = ("it", "this", "they", "these", "that", "which")
PRONOUN_VERBS: tuple[str, ...] = (
    "mention", "say", "state", "specify", "list", "name", "tell", "indicate", "reveal", "cite",
    "refer to", "talk about", "go into", "spell out", "touch on", "discuss", "address", "clarify",
)  # fmt: skip
SOURCE_DETERMINERS = r"(?:(?:the|these|those|this|that|our|my|your|any|all|both) )?(?:(?:provided|given|available|retrieved|supplied|cited|above|listed|quoted|following|relevant) )?"
# Reporting verbs: lemma -> (third person, past participle)
REPORT_VERBS: dict[str, tuple[str, str]] = {
    "mention": ("mentions", "mentioned"),
    "list": ("lists", "listed"),
    "name": ("names", "named"),
    "say": ("says", "said"),
    "state": ("states", "stated"),
    "specify": ("specifies", "specified"),
    "include": ("includes", "included"),
    "contain": ("contains", "contained"),
    "provide": ("provides", "provided"),
    "give": ("gives", "given"),
    "identify": ("identifies", "identified"),
    "indicate": ("indicates", "indicated"),
    "tell": ("tells", "told"),
    "reveal": ("reveals", "revealed"),
    "cover": ("covers", "covered"),
    "discuss": ("discusses", "discussed"),
    "reference": ("references", "referenced"),
    "address": ("addresses", "addressed"),
    "offer": ("offers", "offered"),
    "record": ("records", "recorded"),
    "document": ("documents", "documented"),
    "show": ("shows", "shown"),
    "detail": ("details", "detailed"),
    "describe": ("describes", "described"),
    "cite": ("cites", "cited"),
    "note": ("notes", "noted"),
    "enumerate": ("enumerates", "enumerated"),
    "supply": ("supplies", "supplied"),
    "present": ("presents", "presented"),
    "disclose": ("discloses", "disclosed"),
    "spell out": ("spells out", "spelled out"),
    "touch on": ("touches on", "touched on"),
    "refer to": ("refers to", "referred to"),
    "talk about": ("talks about", "talked about"),
    "go into": ("goes into", "gone into"),
    "have": ("has", "had"),
    "feature": ("features", "featured"),
    "confirm": ("confirms", "confirmed"),
    "answer": ("answers", "answered"),
    "establish": ("establishes", "established"),
    "clarify": ("clarifies", "clarified"),
    "explain": ("explains", "explained"),
}
# Participles and adjectives that describe only a text: a denial without a place.
TEXT_PARTICIPLES: frozenset[str] = frozenset(
    "mentioned stated specified provided cited referenced enumerated spelled out disclosed "
    "referred to touched on talked about gone into clarified indicated identified addressed "
    "answered detailed".split(" ")
) - {""}
TEXT_STATES: tuple[str, ...] = (
    "unclear", "not clear", "undetermined", "unspecified", "unstated", "unmentioned",
    "indeterminate", "not specified", "not determinable", "undeterminable", "unanswerable",
    "not answerable", "not evident", "unaddressed", "unidentified", "unnamed", "undisclosed",
)  # fmt: skip
# States that also describe the world: a denial only with a place in the sources.
LOCATED_STATES: tuple[str, ...] = (
    "unknown", "not known", "uncertain", "absent", "missing", "lacking", "unavailable",
    "not available", "not present", "nowhere to be found", "not to be found", "unlisted",
    "unrecorded", "undocumented", "not apparent", "not included", "not there",
)  # fmt: skip
NEGATIONS_AUX = (
    r"(?:does|do|did) not|(?:does|do|did)n't|does nowhere|fails? to|failed to|never"
    r"|(?:does|do|did) not (?:appear|seem) to|(?:does|do|did)n't (?:appear|seem) to"
    r"|(?:appears?|seems?) not to|(?:cannot|can't|could not|couldn't) be said to"
)
COPULAS = (
    r"(?:is|are|was|were|'s|'re|has been|have been|had been|remains?|remained|seems? to be"
    r"|appears? to be|(?:does|do)(?: not|n't) (?:appear|seem) to be|(?:appears?|seems?) not to be"
    r"|(?:is|are) still|will be|would be|can be|could be)"
)
NEGATION_AFTER_COPULA = (
    r"(?:not|never|nowhere|not anywhere|not explicitly|not directly|not clearly|not specifically)"
)
# "are not", "isn't", "don't seem to be", "appear not to be", "have never been"
NEGATED_COPULAS = (
    rf"(?:{COPULAS} {NEGATION_AFTER_COPULA}|(?:is|are|was|were|has|have|had)n't(?: been)?"
    r"|(?:does|do|did)(?: not|n't) (?:appear|seem) to (?:be|have been)|(?:appears?|seems?) not to (?:be|have been)"
    r"|(?:has|have) (?:never|not) been|(?:can|could)(?:not|n't| not) be)"
)
FIRST_PERSON = r"(?:i|we)"
INABILITIES = (
    r"(?:cannot|can't|can not|could not|couldn't|am unable to|'m unable to|was unable to"
    r"|were unable to|are unable to|'re unable to|am not able to|'m not able to|was not able to"
    r"|were not able to|have not been able to|haven't been able to|did not|didn't|do not|don't"
    r"|failed to|have no way to|found it impossible to|see no way to|was not able to)"
)
FIND_VERBS = (
    "find", "identify", "locate", "determine", "tell", "see", "spot", "confirm", "verify",
    "answer", "name", "list", "provide", "give", "extract", "pinpoint", "discover",
    "come across", "point to", "establish", "say", "know", "ascertain", "retrieve", "get",
)  # fmt: skip
# "there is no <noun> of", "the passages give no <noun> about"
ABSENCE_NOUNS = (
    "mention", "mentions", "information", "info", "details", "detail", "record", "records",
    "reference", "references", "indication", "evidence", "data", "list", "listing", "names",
    "titles", "specifics", "clue", "clues", "sign", "trace", "answer", "explanation", "account",
    "word", "discussion", "description", "data point", "direct mention", "explicit mention",
)  # fmt: skip
ABSENCE_PREPOSITIONS = r"(?:of|about|on|regarding|concerning|for|as to|to|that|in|relating to|related to|pertaining to|with respect to)"
IMPERSONAL_OPENERS = (
    r"(?:it|this|that) (?:is|was|'s|remains|seems|appears) (?:not possible|impossible|unclear|not clear"
    r"|difficult|not feasible) to"
    r"|there (?:is|was|'s) no way to|no way to"
    r"|(?:it|this|that|which|the answer|the question|this question|the information|this information)"
    r" (?:cannot|can't|could not|couldn't|can not) be"
    r"|not (?:possible|able) to"
)
IMPERSONAL_VERBS = (
    "determine", "determined", "say", "said", "tell", "told", "know", "known", "identify",
    "identified", "establish", "established", "confirm", "confirmed", "answer", "answered",
    "infer", "inferred", "deduce", "deduced", "ascertain", "ascertained", "find", "found",
    "extract", "extracted", "verify", "verified", "work out", "worked out", "derive", "derived",
)  # fmt: skip
SILENT_FRAMES = (
    r"(?:is|are|remains?|stays?|was|were) silent (?:on|about|regarding|as to|concerning)",
    r"(?:says?|said|tells?|told) nothing (?:about|on|of|regarding|concerning)",
    r"(?:says?|said|mentions?|mentioned|has|have|had|contains?|contained|offers?|gives?) nothing (?:about|on|regarding|concerning|of)",
    r"makes? no (?:mention|reference) (?:of|to)",
    r"(?:lacks?|lacked|is lacking|are lacking) (?:any )?(?:information|details|mention|data|specifics|names|titles|a list)",
    r"(?:does|do|did) not (?:say|mention|state|list) anything (?:about|on|regarding|of)",
    r"(?:does|do|did)n't (?:say|mention|state|list) anything (?:about|on|regarding|of)",
)
PLACES = (
    r"(?:in|within|from|among|across|by|throughout|inside) (?:any of )?"
    + SOURCE_DETERMINERS
    + r"(?:evidence|passages?|texts?|context|documents?|sources?|excerpts?|extracts?|article|"
    r"material|information|blocks?|snippets?|records|data|search results|results|references|e\d+|\[e\d+\])"
    r"|anywhere|here|explicitly|based on (?:the )?(?:evidence|passages|context|information)"
)

# Detail kinds: a denial whose object is one of these denies a detail, not the
# answer, unless the question asks for that kind ("date" for "what year ...").
DETAIL_KINDS: dict[str, str] = {
    **dict.fromkeys(
        "date dates year years release date release dates publication date birth date "
        "time times day days month months decade era period when chronology timeline".split(" "),
        "date",
    ),
    **dict.fromkeys(
        "chart positions chart position positions position rankings ranking ranks rank sales "
        "figures numbers number count length lengths duration durations price prices amount "
        "percentage size population how many how much peak peaks scores score".split(" "),
        "number",
    ),
    **dict.fromkeys(
        "location locations place places venue venues city cities country countries where "
        "label labels publisher publishers studio studios".split(" "),
        "place",
    ),
    **dict.fromkeys(
        "genre genres style styles lyrics plot plots content contents meaning reason reasons why "
        "how reception critical reception background circumstances context themes theme format "
        "formats track listing track listings lineup personnel producers producer".split(" "),
        "detail",
    ),
}
_QUALIFIED_DETAIL = (
    r"(?:further|additional|more|other|exact|precise|specific|particular|individual|detailed)"
)


@dataclass(frozen=True)
class Denial:
    """One denial found in an answer: its family, the matched words and what it denies."""

    family: str
    matched: str  # the negation and its predicate, as written (casefolded)
    obj: str  # the object the denial is about ("" when none could be read)
    start: int
    end: int


def _alt(words: tuple[str, ...] | list[str] | frozenset[str]) -> str:
    return "(?:" + "|".join(sorted(words, key=len, reverse=True)) + ")"


# "the evidence provided", "the passages I was given"
SOURCE_POSTMODIFIERS = r"(?: (?:provided|given|supplied|available|retrieved|above|here|shown|cited|(?:i|we) (?:was|were) given|(?:you|i) provided))?"
_SOURCES = SOURCE_DETERMINERS + _alt(SOURCE_NOUNS) + SOURCE_POSTMODIFIERS
_LEMMAS = _alt(tuple(REPORT_VERBS))
_THIRD = _alt(tuple(v[0] for v in REPORT_VERBS.values()))
# Participles of finding out: the world's ("the cause was not determined") unless placed.
FINDING_PARTICIPLES: tuple[str, ...] = (
    "found", "present", "available", "known", "determined", "established", "ascertained",
    "inferred", "deduced", "worked out", "located", "retrieved", "extracted",
)  # fmt: skip
_PARTICIPLES = _alt(tuple(v[1] for v in REPORT_VERBS.values()) + FINDING_PARTICIPLES)
_TEXT_PARTICIPLES = _alt(TEXT_PARTICIPLES)
_B = r"(?<![\w'])"
# before a contracted copula ("it's unclear", "they're not listed") a word ends
_BC = r"(?:(?<![\w'])|(?<=\w)(?='))"
_E = r"(?![\w'])"

# family -> (pattern, where the object is: "after" or "before"); the group "m" is
# the part reported as ``denial_pattern_matched``.
FAMILIES: dict[str, tuple[re.Pattern[str], str]] = {
    # "the passages do not list her songs", "E2 doesn't appear to mention it"
    "source_negated_verb": (
        re.compile(
            _B
            + _SOURCES
            + r"(?: (?:\w+ly|even|really|actually|clearly))?"
            + rf" (?P<m>(?:{NEGATIONS_AUX}) (?:(?:explicitly|directly|specifically|actually|clearly|even) )?(?:{_LEMMAS}|{_THIRD}))"
            + _E
        ),
        "after",
    ),
    # "the passages describe X but do not list her songs": the source is the subject
    # of the first verb and the negated second one
    "elided_source": (
        re.compile(
            _B
            + _SOURCES
            + r" [^.;!?]*? (?:but|and|yet) "
            + rf"(?P<m>(?:{NEGATIONS_AUX}) (?:(?:explicitly|directly|specifically|actually|clearly|even) )?(?:{_LEMMAS}|{_THIRD}))"
            + _E
        ),
        "after",
    ),
    "pronoun_negated_verb": (
        re.compile(
            r"(?:^|(?<=[.;:!?,] )|(?<=\bbut )|(?<=\byet )|(?<=\band ))"
            + _alt(PRONOUN_SOURCES)
            + rf" (?P<m>(?:{NEGATIONS_AUX}) (?:(?:explicitly|directly|specifically|actually|clearly|even) )?{_alt(PRONOUN_VERBS)})"
            + _E
        ),
        "after",
    ),
    # "the evidence gives no list of", "the passages contain no mention of", "E1 lists no songs"
    "source_verb_no": (
        re.compile(_B + _SOURCES + rf" (?P<m>(?:{_THIRD}|{_LEMMAS}) (?:no|not any))(?= \w)"),
        "after",
    ),
    # "no specific chart positions are given", "none of his songs are listed in the passages"
    "negated_subject": (
        re.compile(
            _B
            + r"(?P<m>(?:no|none of (?:the|his|her|their|its)) (?P<obj>[\w' -]{1,60}?) "
            + rf"(?:is|are|was|were|has been|have been|seems? to be|appears? to be) (?P<p>{_PARTICIPLES}))"
            + _E
            + r"(?P<place>(?: (?:\w+ )?(?:"
            + PLACES
            + r"))?)"
        ),
        "group",
    ),
    # "the passages are silent on", "the text makes no mention of", "says nothing about"
    "silent": (
        re.compile(
            _B + rf"(?:{_SOURCES}|{_alt(PRONOUN_SOURCES)}) (?P<m>{_alt(SILENT_FRAMES)})" + _E
        ),
        "after",
    ),
    # "her songs are not mentioned", "the titles do not appear to be listed in the evidence"
    "passive": (
        re.compile(
            _BC
            + rf"(?P<m>{NEGATED_COPULAS}(?: (?:\w+ly))? (?P<p>{_PARTICIPLES}))"
            + _E
            + r"(?P<place>(?: (?:\w+ )?(?:"
            + PLACES
            + r"))?)"
        ),
        "before",
    ),
    # "the author is unclear", "the titles are unknown from the evidence"
    "state": (
        re.compile(
            _BC
            + rf"(?P<m>(?:{COPULAS}|{NEGATED_COPULAS})(?: (?:still|also|entirely|completely|largely))? (?P<s>{_alt(TEXT_STATES + LOCATED_STATES + ('clear', 'known', 'specified', 'stated', 'determinable', 'evident', 'available', 'identifiable', 'given'))}))"
            + _E
            + r"(?P<place>(?: (?:\w+ )?(?:"
            + PLACES
            + r"))?)"
        ),
        "before",
    ),
    # "I could not find any works by him", "we were unable to determine who wrote it"
    "first_person": (
        re.compile(
            r"(?:^|(?<=[\s,.;:!?(\"]))"
            + rf"(?P<m>{FIRST_PERSON}(?: |(?=')){INABILITIES}"
            + rf"(?: (?:readily|clearly|definitively|reliably|actually|really|easily))? {_alt(FIND_VERBS)})"
            + _E
        ),
        "after",
    ),
    # "there is no mention of", "no information about", "nothing in the passages names"
    "existential": (
        re.compile(
            _B
            + r"(?P<m>(?:there (?:is|are|was|were|'s|seems to be|appears to be|seem to be|appear to be) )?"
            + rf"(?:no|not any|not a single) (?:(?:specific|explicit|direct|clear|relevant|such|further|mention or) )?{_alt(ABSENCE_NOUNS)}"
            + rf" {ABSENCE_PREPOSITIONS}"
            + r"|there (?:(?:is|are|was|were)n't|(?:does|do|did)(?:n't| not) (?:seem|appear) to be|(?:is|are|was|were) not) "
            + rf"(?:any |a single )?(?:(?:specific|explicit|direct|clear|relevant|such|further) )?{_alt(ABSENCE_NOUNS)}"
            + rf" {ABSENCE_PREPOSITIONS})"
            + _E
            + r"|"
            + _B
            + r"(?P<m2>(?:nothing|none) (?:in|of|from) "
            + SOURCE_DETERMINERS
            + r"(?:evidence|passages|texts?|context|documents|sources|excerpts|extracts|blocks|information|results|snippets)"
            + rf"(?: (?:\w+ )?(?:{_THIRD}|{_LEMMAS}|(?:is|are|was|were) {_PARTICIPLES})))"
            + _E
        ),
        "after",
    ),
    # "there are no songs by her listed in the passages"
    "there_no_participle": (
        re.compile(
            _B
            + r"(?P<m>there (?:is|are|was|were|'s|'re) (?:no|not any) (?P<obj>[\w' -]{1,60}?) "
            + rf"(?P<p>{_PARTICIPLES}))"
            + _E
            + r"(?P<place>(?: (?:\w+ )?(?:"
            + PLACES
            + r"))?)"
        ),
        "group",
    ),
    # "it is not possible to determine", "this cannot be answered from the evidence"
    "impersonal": (
        re.compile(
            _B
            + rf"(?P<m>(?:{IMPERSONAL_OPENERS}) (?:(?:reliably|definitively|clearly|accurately|precisely) )?{_alt(IMPERSONAL_VERBS)})"
            + _E
        ),
        "after",
    ),
    # "nothing here tells me", "there is nothing in the passages that names", "there
    # does not seem to be anything in the excerpts about"
    "nothing_reports": (
        re.compile(
            _B
            + r"(?P<m>(?:there (?:is|was|are|were) (?:not|no|not really) anything|there is nothing"
            + r"|there (?:does|do) not (?:seem|appear) to be anything|there (?:seems|appears) to be nothing"
            + r"|nothing)"
            + r"(?: (?:here|(?:in|within|among|from) "
            + _SOURCES
            + r"))?"
            + rf"(?: that| which)? (?:{_THIRD}|{_LEMMAS}|speaks to|points to|answers)(?: me| us)?"
            + r"|(?:there (?:is|was) not anything|there is nothing|there (?:does|do) not (?:seem|appear) to be anything"
            + r"|there (?:seems|appears) to be nothing)"
            + r"(?: (?:here|(?:in|within|among|from) "
            + _SOURCES
            + r"))? (?:about|regarding|concerning|on the subject of|as to))"
            + _E
        ),
        "after",
    ),
    # "... but i am not seeing any of their other songs", "we are not finding"
    "first_person_progressive": (
        re.compile(
            r"(?:^|(?<=[\s,.;:!?(\"]))"
            + rf"(?P<m>{FIRST_PERSON} (?:am|are) not (?:really |actually |currently )?"
            + r"(?:seeing|finding|spotting|locating|getting))"
            + _E
        ),
        "after",
    ),
    # "not in the evidence", "not found in the passages", "not contained in the"
    "not_in_sources": (
        re.compile(
            _B
            + r"(?P<m>not (?:(?:found|contained|included|present|available|given|listed|named|mentioned|shown|covered|discussed) )?"
            + r"(?:anywhere )?(?:in|within|among) "
            + SOURCE_DETERMINERS
            + r"(?:evidence|passages?|texts?|context|documents?|sources?|excerpts?|extracts?|blocks?|information|material|records|snippets|results))"
            + _E
        ),
        "before",
    ),
}
# The design's v1 phrases, read as its rule says: a casefolded, whitespace-normalised
# substring of the answer ("not mentioned." alone, "there are no specific songs listed
# for her"). Spelled out as ``_spell_out`` leaves them; the object rules still apply,
# so "no specific chart positions are given" stays a denial of a detail.
SEED_PHRASES: tuple[tuple[str, str], ...] = (
    ("not mentioned", "before"), ("not provided", "before"),
    ("the evidence does not say", "after"), ("does not mention", "after"),
    ("no specific", "after"), ("no evidence", "after"),
    ("can not determine from the provided evidence", "after"),
    ("cannot determine from the provided evidence", "after"),
    ("is not stated", "before"), ("is not specified", "before"),
)  # fmt: skip
FAMILIES.update({
    f"seed_{where}": (re.compile("(?P<m>" + _alt(tuple(re.escape(p) for p, w in SEED_PHRASES
                                                       if w == where)) + ")"), where)
    for where in ("before", "after")
})  # fmt: skip
_NOT_A_NEGATION = re.compile(
    r"\bnot (?:only|just|merely|until|simply)\b|\bno (?:doubt|longer|matter|fewer|less|more)\b"
)
_CLAUSE_END = re.compile(
    r"[.;:!?]|,? (?:but|although|though|however|whereas|while|yet|and (?:the|it|so)|so)\b|, "
)
_CLAUSE_START = re.compile(
    r"[.;:!?]|\b(?:but|although|though|however|whereas|while|yet|and|so|because|since)\b|,"
)
# Every family's match holds one of these words: only the sentences holding one are
# scanned, and an answer without any skips the scans (most answers deny nothing).
TRIGGERS: tuple[str, ...] = tuple(
    sorted(
        {"not", "n't", "no", "none", "nothing", "never", "nowhere", "cannot", "impossible",
         "lack", "lacks", "lacked", "lacking", "silent", "fail", "fails", "failed", "unable",
         "difficult"}
        | {w for state in TEXT_STATES + LOCATED_STATES for w in state.split() if w != "to"}
        - {"be", "found", "there", "present", "available", "known", "clear", "specified",
           "included", "evident", "apparent", "answerable", "determinable"}
    )
)  # fmt: skip
_TRIGGER_RE = re.compile(
    r"(?<![\w'])(?:" + "|".join(re.escape(t) for t in TRIGGERS if t != "n't") + r")(?![\w'])|n't\b"
)
_SENTENCE_RE = re.compile(r"[^.;!?\n]+[.;!?]*")


_REPORT_WITH_SUBJECT = frozenset(
    {"source_negated_verb", "pronoun_negated_verb", "source_verb_no", "silent"}
)
_LEADING_COPULA = re.compile(rf"^{COPULAS} (?={NEGATION_AFTER_COPULA}\b)")
_LEADING_PLACE = re.compile(r"^\s*(?:(?:" + PLACES + r")\s*,?\s*)+")


def _object_after(text: str, end: int) -> str:
    rest = _LEADING_PLACE.sub("", text[end:])
    stop = _CLAUSE_END.search(rest)
    return rest[: stop.start() if stop else len(rest)].strip(" ,")


def _object_before(text: str, start: int) -> str:
    head = text[:start]
    starts = list(_CLAUSE_START.finditer(head))
    begin = starts[-1].end() if starts else 0
    return head[begin:].strip(" ,")


# Contractions are spelled out before the families run, so every family that reads
# "was not able to" also reads "wasn't able to", "i am not" reads "i'm not", and a
# table never needs both spellings of a word.
_CONTRACTIONS = (
    (re.compile(r"\b(?:won't)"), "will not"),
    (re.compile(r"\b(?:can't)"), "can not"),
    (re.compile(r"\b(?:shan't)"), "shall not"),
    (re.compile(r"\b(?:ain't)"), "is not"),
    (re.compile(r"(?<=\w)n't\b"), " not"),
    (re.compile(r"\bi'm\b"), "i am"),
    (re.compile(r"(?<=\w)'re\b"), " are"),
    (re.compile(r"\b(it|that|there|this|what|here|which)'s\b"), r"\1 is"),
    (re.compile(r"\b(i|we|they|you)'ve\b"), r"\1 have"),
)


def _spell_out(text: str) -> str:
    for pattern, full in _CONTRACTIONS:
        text = pattern.sub(full, text)
    return text


def find_denials(answer: str) -> list[Denial]:
    """Every denial the grammar reads in the answer, in text order."""
    text = normalize(answer)
    if not _TRIGGER_RE.search(text):
        return []
    text = _spell_out(text)
    found: list[Denial] = []
    for sentence in _SENTENCE_RE.finditer(text):
        if _TRIGGER_RE.search(sentence.group(0)):
            found += _sentence_denials(sentence.group(0), sentence.start())
    return sorted(found, key=lambda d: (d.start, d.end))


# Each family runs only on a sentence holding one of the words it must match.
_FAMILY_LIST = tuple((family, pattern, where) for family, (pattern, where) in FAMILIES.items())
_GATED_FAMILIES = GatedPatterns(pattern for _, pattern, _ in _FAMILY_LIST)


def _sentence_denials(text: str, offset: int) -> list[Denial]:
    found: list[Denial] = []
    for i in _GATED_FAMILIES.candidates(text):
        family, pattern, where = _FAMILY_LIST[i]
        for match in pattern.finditer(text):
            group = "m" if match.group("m") is not None else "m2"
            core_start, core_end = match.span(group)
            window = text[max(0, core_start - 4) : core_end + 12]
            if _NOT_A_NEGATION.search(window):
                continue
            if not _located_ok(family, match):
                continue
            if where == "group":
                obj = match["obj"]
            elif where == "after":
                obj = _object_after(text, match.end())
            else:
                obj = _object_before(text, match.start())
                # "it is unclear who wrote it": the object follows the state
                if (
                    obj in ("", "it", "this", "that", "which", "what")
                    or family == "not_in_sources"
                    and not obj
                ):
                    obj = _object_after(text, match.end())
            words = match.group(group)
            if family in _REPORT_WITH_SUBJECT:  # "the evidence does not say", as v1 named it
                words = match.group(0).strip()
            elif family == "passive":  # "are not mentioned" is reported as "not mentioned"
                words = _LEADING_COPULA.sub("", words)
            found.append(Denial(family, words, obj, offset + core_start, offset + core_end))
    return found


_POSITIVE_STATES = {
    "clear": "not clear", "known": "not known", "specified": "not specified", "stated": "unstated",
    "determinable": "undeterminable", "evident": "not evident", "available": "not available",
    "identifiable": "unidentified", "given": "not specified",
}  # fmt: skip


# Objects that only a text holds: "no titles are given" denies, where "no songs were
# released" (the world's participle on the world's noun) is a fact.
TEXT_OBJECTS: frozenset[str] = frozenset(
    "titles title names name list lists listing details specifics examples information info "
    "mention mentions references".split()
)


def _names_text(obj: str) -> bool:
    words = obj.split()
    return bool(words) and words[-1] in TEXT_OBJECTS


def _located_ok(family: str, match: re.Match[str]) -> bool:
    """A world-describing participle or state needs a place in the sources."""
    placed = bool(match.groupdict().get("place") and match["place"].strip())
    if family in ("negated_subject", "there_no_participle") and _names_text(match["obj"]):
        return True  # "no titles are given": titles and names are what a text gives
    if family in ("passive", "negated_subject", "there_no_participle"):
        return match["p"] in TEXT_PARTICIPLES or placed
    if family == "state":
        state = match["s"]
        if state in _POSITIVE_STATES:  # "is not clear": only negated copulas negate it
            if not re.search(r"not|n't|never", match["m"]):
                return False
            state = _POSITIVE_STATES[state]
        return state in TEXT_STATES or placed
    return True


# Words that say nothing of what is denied: "any information about <the dates>" denies
# what follows them.
GENERIC_HEADS: frozenset[str] = frozenset(
    "a an the any no some such specific explicit direct clear relevant much information info "
    "details detail mention mentions data record records reference references indication "
    "specifics word account description discussion anything something nothing".split()
)
_HEAD_STOPS = ("of", "by", "for", "about", "from", "in", "on", "to", "that", "which", "regarding",
               "concerning")  # fmt: skip


def detail_kind(obj: str) -> str | None:
    """The detail kind a denial's object names first, or None for the answer itself."""
    words = [w.strip(",.;:!?\"'") for w in obj.split()]
    generic_so_far = True
    for i in range(len(words)):
        for width in (3, 2, 1):
            phrase = " ".join(words[i : i + width])
            if phrase in DETAIL_KINDS:
                return DETAIL_KINDS[phrase]
        # the head noun of the object: stop at the first "of/by/for/about" unless
        # only generic words came before it
        if words[i] in _HEAD_STOPS and not generic_so_far:
            break
        generic_so_far = generic_so_far and (words[i] in GENERIC_HEADS or words[i] in _HEAD_STOPS)
    return None


def is_partial(denial: Denial, question_words: set[str], answer_type: str) -> bool:
    """The denial names a detail of another kind than the question asks for."""
    kind = detail_kind(denial.obj)
    if kind is None:
        # "no further details are given", "additional information is not provided"
        return bool(
            re.match(
                rf"(?:(?:the|any|no) )?{_QUALIFIED_DETAIL} (?:details|information|specifics)\b",
                denial.obj,
            )
        )
    head = [w for w in denial.obj.split()[:4] if w in question_words]
    if head:
        return False  # the object is what the question asks about ("the positions he held")
    return kind != answer_type


_EVIDENCE_TAG = re.compile(r"\[e\d+|\(e\d+\)")


# Words that name what a question of each answer type asks for ("who the painter was"
# for "who painted ...", "the titles" for a list): a denial of one is never of a side
# detail. "who sang the premieres" is a side detail of "What operas did Verdi write?".
ASKED_WORDS: dict[str, frozenset[str]] = {
    "person": frozenset("who whom author writer creator maker name".split()),
    "date": frozenset("year date when".split()),
    "title_like": frozenset("name names title titles".split()),
}


def _stem(word: str) -> str:
    """A word's first five letters: "painter" and "painted", "ballet" and "ballets" meet."""
    return word.strip(",.;:!?\"'()[]").removesuffix("'s")[:5]


def is_after_answer(
    denial: Denial, text: str, question_words: set[str], answer_type: str = "title_like"
) -> bool:
    """The answer already stated something with a citation, and this denial's object
    names nothing the question asks about: it denies a side detail ("Leonardo da Vinci
    painted the Mona Lisa [E1]. I couldn't find anything about what it cost")."""
    if not _EVIDENCE_TAG.search(text[: denial.start]):
        return False
    asked = {_stem(w) for w in question_words if len(w) >= 4}
    obj = denial.obj.split()
    named = ASKED_WORDS.get(answer_type, frozenset())
    return not any(w in named or (len(w) >= 4 and _stem(w) in asked) for w in obj)


def match_denial(
    answer: str, question_words: set[str] | None = None, answer_type: str = "title_like"
) -> Denial | None:
    """The first denial of the answer (not of a detail) in the answer, or None."""
    words = question_words or set()
    text = _spell_out(normalize(answer))
    for denial in find_denials(answer):
        if is_partial(denial, words, answer_type):
            continue
        if words and is_after_answer(denial, text, words, answer_type):
            continue
        return denial
    return None
