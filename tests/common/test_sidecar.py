"""The answerability sidecar of docs/grounding.md, 'Answerability sidecar'."""

from __future__ import annotations

import json

import pytest

from common.models import Answerability, Confidence, Evidence
from common.policy import Policy, build_policy
from common.denials import FAMILIES, TRIGGERS, find_denials
from common.sidecar import (
    MAX_SPANS,
    assess_answerability,
    match_denial,
    subject_tokens_for,
)


def make_ev(i: int, title: str, text: str) -> Evidence:
    return Evidence(
        id=f"E{i}",
        doc_id=title,
        chunk_id=f"{title}:0",
        title=title,
        text=text,
        score=1.0,
        offset_start=0,
        offset_end=len(text),
    )


BALLESTRINI = make_ev(
    2,
    "Veronica Ballestrini",
    "Veronica Ballestrini is an American country pop singer and songwriter from Brookfield, "
    'Connecticut. Her debut album was released in 2009 and included the singles "Amazing", '
    '"Out There Somewhere" and "Hoochie Coochie". Ballestrini later toured with Taylor Swift.',
)
FILLER = make_ev(
    1,
    "Country music",
    "Country music is a genre of popular music that originated in the southern United States.",
)
HARVARD = make_ev(
    1,
    "Harvard University",
    "Harvard University is a private Ivy League research university in Cambridge, Massachusetts, "
    "United States. Founded in 1636, and named Harvard College in 1639 in honor of its first "
    "benefactor, Puritan clergyman John Harvard, it is the oldest institution of higher learning.",
)
NEW_YORK = make_ev(
    2,
    "New York City",
    "New York, often called New York City, is the most populous city in the United States. "
    'Nicknamed "The Big Apple", it comprises five boroughs: Manhattan, Brooklyn, Queens, '
    "the Bronx, and Staten Island.",
)
SONGS_Q = "songs by veronica ballestrini"
DENIAL = "Veronica Ballestrini's songs are not mentioned in the evidence."
DETAIL_KEYS = {
    "diagnostic_version",
    "confidence_class",
    "triggered_clauses",
    "denial_pattern_matched",
    "extraction_cue_matched",
    "extraction_shape",
    "answer_type",
    "subject_tokens",
    "candidate_count",
    "threshold",
    "missed_answer_candidate_spans",
}


def test_motivating_case_fires_strong() -> None:
    result = assess_answerability(SONGS_Q, DENIAL, [FILLER, BALLESTRINI], Policy())
    assert result is not None
    assert result.confidence_class == "strong"
    assert result.denial_pattern_matched == "not mentioned"
    assert result.extraction_cue_matched == "songs by"
    assert result.extraction_shape == "cue"
    assert result.answer_type == "title_like"
    assert result.subject_tokens == ("veronica", "ballestrini")
    assert result.triggered_clauses == ("denial", "extraction_shape", "candidates_in_evidence")
    texts = [s.text for s in result.missed_answer_candidate_spans]
    assert texts[:3] == ["Amazing", "Out There Somewhere", "Hoochie Coochie"]
    assert "Veronica Ballestrini" not in texts  # the subject is not its own answer


def test_spans_have_unambiguous_offsets_into_the_evidence_text() -> None:
    result = assess_answerability(SONGS_Q, DENIAL, [FILLER, BALLESTRINI], Policy())
    assert result is not None
    for span in result.missed_answer_candidate_spans:
        assert span.evidence_id == "E2"
        assert span.offset_basis == "evidence_object_text"
        assert BALLESTRINI.text[span.offset_start : span.offset_end] == span.text


def test_result_is_a_typed_model_whose_json_keeps_the_detail_keys() -> None:
    result = assess_answerability(SONGS_Q, DENIAL, [BALLESTRINI], Policy())
    assert isinstance(result, Answerability)
    dumped = _dump(result)
    assert DETAIL_KEYS <= set(dumped)
    assert set(dumped) - DETAIL_KEYS == {"denial_patterns_version", "extraction_cues_version"}
    assert dumped["threshold"] == "medium" and dumped["confidence_class"] == "strong"
    assert set(dumped["missed_answer_candidate_spans"][0]) == {
        "evidence_id", "kind", "text", "offset_start", "offset_end", "offset_basis"
    }
    assert result.threshold is Confidence.MEDIUM


def _dump(result: Answerability | None) -> dict[str, object] | None:
    """The JSON the job detail carries (what ``qfarm ask --json`` prints)."""
    return None if result is None else json.loads(result.model_dump_json())


def test_john_smith_control_stays_silent() -> None:
    denial = "Songs by John Smith are not mentioned in the evidence."
    assert (
        assess_answerability("songs by John Smith", denial, [HARVARD, NEW_YORK], Policy()) is None
    )


def test_denial_alone_stays_silent() -> None:
    # not extraction-shaped: no cue, no broad quantifier, no plural of things
    q = "What is the hometown of Veronica Ballestrini?"
    assert assess_answerability(q, DENIAL, [BALLESTRINI], Policy()) is None


def test_extraction_shape_alone_stays_silent() -> None:
    answer = 'Her singles include "Amazing" and "Out There Somewhere". [E2]'
    assert assess_answerability(SONGS_Q, answer, [BALLESTRINI], Policy()) is None


def test_candidates_alone_stay_silent() -> None:
    q = "Where is Veronica Ballestrini from?"
    answer = "She is from Brookfield, Connecticut. [E2]"
    assert assess_answerability(q, answer, [BALLESTRINI], Policy()) is None


def test_denial_and_shape_without_candidates_stay_silent() -> None:
    assert assess_answerability(SONGS_Q, DENIAL, [FILLER, HARVARD], Policy()) is None


def test_candidates_beyond_the_proximity_window_do_not_count() -> None:
    far = make_ev(
        1,
        "Veronica Ballestrini",
        "Veronica Ballestrini is a singer. "
        + "Filler text without names. " * 40
        + 'A list: "Amazing", "Out There Somewhere", "Hoochie Coochie".',
    )
    assert assess_answerability(SONGS_Q, DENIAL, [far], Policy()) is None
    wide = build_policy({"answerability_proximity_chars": 5000})
    assert assess_answerability(SONGS_Q, DENIAL, [far], wide) is not None


def test_output_is_byte_identical_on_repeat() -> None:
    runs = [
        json.dumps(_dump(assess_answerability(SONGS_Q, DENIAL, [FILLER, BALLESTRINI], Policy())))
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0] != "null"


def test_disabled_sidecar_short_circuits() -> None:
    off = build_policy({"answerability_sidecar_enabled": False})
    assert assess_answerability(SONGS_Q, DENIAL, [BALLESTRINI], off) is None


def test_threshold_is_the_minimum_class_reported() -> None:
    # one unquoted title for a question asking for several songs: weak
    one = make_ev(1, "Veronica Ballestrini", "Veronica Ballestrini recorded Blue Sky Morning.")
    assert assess_answerability(SONGS_Q, DENIAL, [one], Policy()) is None  # weak < medium
    weak = assess_answerability(SONGS_Q, DENIAL, [one], build_policy({"answerability_threshold": "weak"}))
    assert weak is not None
    assert (weak.confidence_class, weak.answer_type) == ("weak", "title_like")
    assert weak.missed_answer_candidate_spans[0].text == "Blue Sky Morning"
    strong_only = build_policy({"answerability_threshold": "strong"})
    assert assess_answerability(SONGS_Q, DENIAL, [BALLESTRINI], strong_only) is not None


def test_person_answer_type_uses_title_case_names() -> None:
    beatles = make_ev(
        1,
        "The Beatles",
        "The Beatles were an English rock band. The band comprised "
        "John Lennon, Paul McCartney, George Harrison and Ringo Starr.",
    )
    result = assess_answerability(
        "Who were the members of the Beatles?",
        "The members are not mentioned.",
        [beatles],
        Policy(),
    )
    assert result is not None
    assert result.answer_type == "person"
    assert result.confidence_class == "medium"  # several names, no quoted string
    assert [s.text for s in result.missed_answer_candidate_spans] == [
        "John Lennon",
        "Paul McCartney",
        "George Harrison",
        "Ringo Starr",
    ]


def test_at_most_ten_spans_but_every_candidate_counted() -> None:
    titles = ", ".join(f'"Song Number {n}"' for n in range(15))
    many = make_ev(1, "Veronica Ballestrini", f"Veronica Ballestrini recorded {titles}.")
    result = assess_answerability(SONGS_Q, DENIAL, [many], Policy())
    assert result is not None
    assert len(result.missed_answer_candidate_spans) == MAX_SPANS
    assert result.candidate_count >= 15


@pytest.mark.parametrize(
    ("question", "tokens"),
    [
        ("songs by veronica ballestrini", ["veronica", "ballestrini"]),
        ("Who wrote the novels of Jane Austen?", ["jane", "austen"]),
        ("List all albums by Pink Floyd", ["pink", "floyd"]),
        ("What year did the Berlin Wall fall?", ["berlin", "wall"]),  # "fall" is its verb
    ],
)
def test_subject_tokens_drop_cue_relation_and_stop_words(question: str, tokens: list[str]) -> None:
    assert subject_tokens_for(question) == tokens


# One denial per family of the grammar (common/denials.py, ``FAMILIES``).
FAMILY_EXAMPLES: dict[str, str] = {
    "source_negated_verb": "The passages do not list her songs.",
    "elided_source": "The passages describe her career but do not name her songs.",
    "pronoun_negated_verb": "It does not say which songs she recorded.",
    "source_verb_no": "The evidence gives no titles of her songs.",
    "negated_subject": "None of her songs are mentioned.",
    "silent": "The evidence is silent on her songs.",
    "passive": "Her songs are not mentioned.",
    "state": "Her songs are unclear.",
    "first_person": "I could not find her songs.",
    "existential": "There is no information about her songs.",
    "there_no_participle": "There are no songs by her listed in the passages.",
    "impersonal": "It is not possible to determine which songs she recorded.",
    "not_in_sources": "Her songs are not in the evidence.",
}


def test_every_family_has_an_example() -> None:
    assert set(FAMILY_EXAMPLES) == set(FAMILIES)


@pytest.mark.parametrize(("family", "answer"), FAMILY_EXAMPLES.items())
def test_every_family_matches_casefolded_and_whitespace_normalized(family: str, answer: str) -> None:
    assert family in {d.family for d in find_denials(answer)}
    mangled = "Sorry:   " + answer.upper().replace(" ", "  \n ")
    assert family in {d.family for d in find_denials(mangled)}
    assert assess_answerability(SONGS_Q, mangled, [BALLESTRINI], Policy()) is not None


def test_broad_quantifier_or_plural_makes_a_question_extraction_shaped() -> None:
    by_quantifier = assess_answerability(
        "Tell me about Veronica Ballestrini", DENIAL, [BALLESTRINI], Policy()
    )
    assert by_quantifier is not None and by_quantifier.extraction_shape == "quantifier"
    by_plural = assess_answerability(
        "Which singles did Veronica Ballestrini release?", DENIAL, [BALLESTRINI], Policy()
    )
    assert by_plural is not None and by_plural.extraction_shape == "plural"


def test_qualifiers_like_well_known_are_not_subject_tokens() -> None:
    from common.sidecar import subject_tokens_for

    assert subject_tokens_for("What songs by Gabriel Fauré are well known?") == ["gabriel", "fauré"]
    assert subject_tokens_for("Which influential works by Kafka are remembered?") == ["kafka"]


# --------------------------------------------------------------------------- issue 18

SEED = make_ev(
    2,
    "Veronica Ballestrini",
    "Veronica Ballestrini is an American country pop singer and songwriter from Brookfield, "
    'Connecticut. Her debut album included the singles "Amazing", "Out There Somewhere", '
    '"Hoochie Coochie", "What\'s Up With That" and "Pretty Ugly".',
)
SEED_TITLES = [
    "Amazing",
    "Out There Somewhere",
    "Hoochie Coochie",
    "What's Up With That",
    "Pretty Ugly",
]


def test_seed_positive_case_reports_all_five_song_titles() -> None:
    result = assess_answerability(SONGS_Q, DENIAL, [FILLER, SEED], Policy())
    assert result is not None
    quoted = [
        s.text for s in result.missed_answer_candidate_spans if s.kind == "quoted_string"
    ]
    assert quoted == SEED_TITLES  # "What's Up With That" is all stop words, and still a title


def test_an_unquoted_run_that_is_only_the_subjects_name_is_still_dropped() -> None:
    result = assess_answerability(SONGS_Q, DENIAL, [SEED], Policy())
    assert result is not None
    assert "Veronica Ballestrini" not in [
        s.text for s in result.missed_answer_candidate_spans
    ]


def test_candidate_kinds_use_the_design_names() -> None:
    titles = assess_answerability(SONGS_Q, DENIAL, [SEED], Policy())
    assert titles is not None and titles.diagnostic_version == "answerability-v3"
    assert {s.kind for s in titles.missed_answer_candidate_spans} <= {
        "quoted_string",
        "title_case_span",
        "comma_list_item",
    }
    listing = make_ev(
        1,
        "Veronica Ballestrini",
        "Veronica Ballestrini played Brookfield, Danbury, Hartford and Stamford before Nashville.",
    )
    spans = assess_answerability(SONGS_Q, DENIAL, [listing], Policy())
    assert spans is not None
    assert "comma_list_item" in {s.kind for s in spans.missed_answer_candidate_spans}
    dated = make_ev(
        1,
        "Veronica Ballestrini",
        "Veronica Ballestrini released her debut on 12 May 2009 and a second album in 2012.",
    )
    when = assess_answerability(
        "When did Veronica Ballestrini release albums?", DENIAL, [dated], Policy()
    )
    assert when is not None
    kinds = {s.text: s.kind for s in when.missed_answer_candidate_spans}
    assert kinds == {"12 May 2009": "date", "2012": "year"}


WORKS_EV = make_ev(
    1,
    "Albert Camus",
    "Albert Camus was a French philosopher and author. His works by year include "
    '"The Stranger", "The Plague", "The Myth of Sisyphus" and "The Fall".',
)


@pytest.mark.parametrize(
    "answer",
    [
        "I could not find any works by Albert Camus in the provided evidence.",
        "The provided passages do not list works by Albert Camus.",
        "I couldn't identify any of his works in the passages.",
        "I was unable to locate a list of works by Albert Camus.",
        "The evidence doesn't mention any titles by Albert Camus.",
        "The sources do not include his works.",
        "There is no information about works by Albert Camus.",
        "The passages make no mention of his novels.",
        "None of the passages list works by Albert Camus.",
        "His works are not listed in the evidence.",
        "Works by Camus are not found in the provided passages.",
        "This is not in the evidence I was given.",
        "It cannot be determined from the passages which works he wrote.",
        "The context does not provide the titles of his works.",
        "We were unable to find his works.",
    ],
)
def test_common_denials_fire_on_evidence_that_lists_the_works(answer: str) -> None:
    result = assess_answerability(
        "What are the works by Albert Camus?", answer, [WORKS_EV], Policy()
    )
    assert result is not None, answer


def test_the_prefilter_skips_only_answers_no_family_could_match() -> None:
    for answer in FAMILY_EXAMPLES.values():
        for denial in find_denials(answer):
            assert any(t in denial.matched for t in TRIGGERS), denial


NON_DENIALS = [
    "The evidence does not contradict the claim that Camus wrote The Stranger.",
    "Camus wrote not only novels but also plays and essays.",
    "It was not until 1942 that The Stranger was published.",
    "He did not find success until The Stranger appeared.",
    "He was unable to find a publisher for his first essays.",
    "The Fall was not released as a film until much later.",
    "The passages list The Stranger, The Plague and The Fall. [E1]",
    "Passage E1 mentions The Plague. [E1]",
    "Camus never stopped writing.",
    "There is no doubt that The Stranger is his best known work.",
    "The evidence names no fewer than four works.",
    "None of his novels was a commercial failure.",
    "I found his works listed in E1.",
    "The Plague was not a commercial success at first.",
    "The passages do not disagree about his works.",
    "The publisher did not announce a date, but the evidence gives 1947.",
    "The evidence does not only list novels, it lists essays too.",
    "He could not identify with either side of the war.",
    "The novel does not include a happy ending.",
    "Nothing in his life was simple, yet he wrote The Stranger.",
    "He is silent on the matter in The Fall.",
]


@pytest.mark.parametrize("answer", NON_DENIALS)
def test_non_denials_do_not_match(answer: str) -> None:
    assert match_denial(answer) is None


def test_assess_answerability_takes_logged_dicts_and_skips_blocks_without_text() -> None:
    as_dicts = [
        {"id": "E1", "title": "Country music"},  # a logged row kept no text here
        {"id": "E2", "title": SEED.title, "text": SEED.text},
        {"text": None},
    ]
    from_dicts = assess_answerability(SONGS_Q, DENIAL, as_dicts, Policy())
    from_objects = assess_answerability(SONGS_Q, DENIAL, [FILLER, SEED], Policy())
    assert from_dicts is not None and from_objects is not None
    assert (
        from_dicts.missed_answer_candidate_spans == from_objects.missed_answer_candidate_spans
    )
    positional = assess_answerability(SONGS_Q, DENIAL, [{"text": SEED.text}], Policy())
    assert positional is not None
    assert {s.evidence_id for s in positional.missed_answer_candidate_spans} == {"E1"}
