"""The answerability sidecar of docs/grounding.md, 'Answerability sidecar'."""

from __future__ import annotations

import json

import pytest

from qfarm.common.grounding.denials import _TRIGGER_RE, FAMILIES, find_denials
from qfarm.common.grounding.sidecar import (
    MAX_SPANS,
    assess_answerability,
    denial_of_answer,
    match_denial,
    subject_tokens_for,
)
from qfarm.common.models import Answerability, Confidence, Evidence
from qfarm.common.policy import Policy, build_policy
from tests.common.passages import passage


def make_ev(i: int, title: str, text: str) -> Evidence:
    return passage(i, title, text)


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


# One denial per family of the grammar (common/grounding/denials.py, ``FAMILIES``).
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
    "nothing_reports": "Nothing here tells me her songs.",
    "first_person_progressive": "The passages describe her, but I'm not seeing any of her songs.",
    "seed_before": "Not mentioned.",
    "seed_after": "There are no specific songs listed for her.",
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
    from qfarm.common.grounding.sidecar import subject_tokens_for

    assert subject_tokens_for("What songs by Gabriel Fauré are well known?") == ["gabriel", "fauré"]
    assert subject_tokens_for("Which influential works by Kafka are remembered?") == ["kafka"]


# ---------------------------------------------- the seed case: a list of song titles

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
    assert titles is not None and titles.diagnostic_version == "answerability-v4"
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
            assert _TRIGGER_RE.search(denial.matched), denial


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


# --------------------------------------------------------------------------- subject, denials, strength

KAHLO = make_ev(
    1,
    "Frida Kahlo",
    "Frida Kahlo was a Mexican painter known for her self-portraits. Her paintings include "
    '"The Two Fridas", "Self-Portrait with Thorn Necklace and Hummingbird" and "The Broken Column".',
)


@pytest.mark.parametrize(
    "question",
    [
        "What paintings did Frida Kahlo create?",
        "Which paintings has Frida Kahlo created?",
        "What paintings was Frida Kahlo creating?",
        "What paintings did Frida Kahlo make?",
        "What paintings did Frida Kahlo compose?",
        "What paintings did Frida Kahlo build?",
        "What paintings did Frida Kahlo open?",
        "What paintings did Frida Kahlo direct?",
        "What paintings did Frida Kahlo helm?",  # a verb no table lists: it follows the name
    ],
)
def test_subject_words_exclude_the_questions_verbs_in_any_form(question: str) -> None:
    assert subject_tokens_for(question) == ["frida", "kahlo"]
    result = assess_answerability(question, "They are not mentioned.", [KAHLO], Policy())
    assert result is not None and result.confidence_class == "strong"


@pytest.mark.parametrize(
    ("lemma", "forms"),
    [
        ("write", {"write", "writes", "wrote", "written", "writing"}),
        ("build", {"build", "builds", "built", "building"}),
        ("create", {"create", "creates", "created", "creating"}),
        ("star", {"star", "stars", "starred", "starring"}),
        ("copy", set()),  # not a question verb: nothing dropped
    ],
)
def test_verb_forms_cover_regular_and_irregular_inflections(lemma: str, forms: set[str]) -> None:
    from qfarm.common.grounding.sidecar import QUESTION_VERB_FORMS, verb_forms

    assert forms <= verb_forms(lemma)
    assert forms <= QUESTION_VERB_FORMS


def test_a_block_whose_title_names_the_subject_counts_when_its_text_uses_another_name() -> None:
    other_given_name = make_ev(
        1,
        "Veronica Ballestrini",
        'Born Ronnie Lynn Ballestrini, the singer released "Amazing" and "Pretty Ugly" in 2009.',
    )
    result = assess_answerability(SONGS_Q, DENIAL, [other_given_name], Policy())
    assert result is not None
    assert [s.text for s in result.missed_answer_candidate_spans][:2] == ["Amazing", "Pretty Ugly"]


def test_a_known_alias_of_a_given_name_counts() -> None:
    marley = make_ev(
        1,
        "Reggae",
        'Robert Nesta Marley wrote "One Love" and "Redemption Song", among many others.',
    )
    result = assess_answerability(
        "What songs did Bob Marley write?", "His songs are not mentioned.", [marley], Policy()
    )
    assert result is not None and result.confidence_class == "strong"


def test_the_control_stays_silent_with_titles_and_aliases_in_play() -> None:
    denial = "Songs by John Smith are not mentioned in the evidence."
    johnny = make_ev(3, "Johnny Cash", 'Johnny Cash recorded "Hurt" and "Ring of Fire".')
    for question in ("songs by John Smith", "What songs did John Smith write?"):
        assert assess_answerability(question, denial, [HARVARD, NEW_YORK, johnny], Policy()) is None


# Denials the old closed list did not know: adjectives, passives, appear/seem,
# contractions, modal inability, unclear/undetermined.
UNTAUGHT_DENIALS = [
    "His works are unclear from the passages.",
    "Which works he wrote is undetermined.",
    "The titles of his works remain unspecified.",
    "His novels aren't named in the passages.",
    "His works don't appear to be listed in the evidence.",
    "The passages do not seem to mention his works.",
    "His works seem not to be covered by the evidence.",
    "I'm unable to identify his works.",
    "I can't tell which works he wrote from these passages.",
    "It's unclear which works Camus wrote.",
    "Which works he wrote cannot be established from the text.",
    "There doesn't appear to be any mention of his works.",
    "The passages describe his life but don't list his works.",
    "The evidence never mentions his novels.",
    "His works go unmentioned; the passages are silent about them.",
    "The text lacks any information about his works.",
    "No works by Camus are named in the evidence.",
    "There are no novels by Camus listed in the passages.",
]


@pytest.mark.parametrize("answer", UNTAUGHT_DENIALS)
def test_denials_built_from_the_grammar_fire(answer: str) -> None:
    result = assess_answerability("What are the works by Albert Camus?", answer, [WORKS_EV], Policy())
    assert result is not None, answer


PARTIAL_DENIALS = [
    'Her singles include "Amazing" and "Out There Somewhere"; the release dates are not mentioned.',
    'The evidence names "Amazing", but it does not say when it was published.',
    'Her songs include "Amazing"; no specific chart positions are given.',
    "The release dates are not mentioned.",
    "It does not say when it was published.",
    "No specific chart positions are given.",
    "Further details are not provided.",
    "The label is not mentioned in the evidence.",
]


@pytest.mark.parametrize("answer", PARTIAL_DENIALS)
def test_a_denial_of_a_detail_is_not_a_denial_of_the_answer(answer: str) -> None:
    assert assess_answerability(SONGS_Q, answer, [FILLER, BALLESTRINI], Policy()) is None
    assert match_denial(answer) is None


@pytest.mark.parametrize(
    "answer",
    [
        "The release dates are not mentioned.",
        "I could not find any information about the release dates of their songs.",
        "There is no mention of the chart positions of their singles.",
    ],
)
def test_a_detail_denial_stays_partial_whatever_the_question_words(answer: str) -> None:
    beatles = make_ev(
        1, "The Beatles", 'The Beatles recorded "Help!", "Yesterday" and "Let It Be" for EMI.'
    )
    question = "What songs did the Beatles record?"  # "the" is in the question and the object
    assert assess_answerability(question, answer, [beatles], Policy()) is None
    denial = "The songs of the Beatles are not mentioned."
    assert assess_answerability(question, denial, [beatles], Policy()) is not None


def test_a_denied_detail_is_a_denial_when_the_question_asks_for_it() -> None:
    dated = make_ev(1, "Veronica Ballestrini", "Veronica Ballestrini released her debut album in 2009.")
    result = assess_answerability(
        "In what year did Veronica Ballestrini release her debut album?",
        "It does not say when it was released.",
        [dated],
        Policy(),
    )
    assert result is not None and result.answer_type == "date"


def test_one_named_author_for_who_wrote_is_a_medium_finding() -> None:
    novel = make_ev(1, "The Stranger", "The Stranger is a 1942 novel by the French author Albert Camus.")
    result = assess_answerability(
        "Who wrote The Stranger?", "The author is not mentioned in the evidence.", [novel], Policy()
    )
    assert result is not None
    assert (result.confidence_class, result.candidate_count) == ("medium", 1)
    assert result.missed_answer_candidate_spans[0].text == "Albert Camus"


def test_two_quoted_candidates_near_the_subject_are_strong() -> None:
    two = make_ev(
        1, "Veronica Ballestrini", 'Veronica Ballestrini released "Amazing" and "Pretty Ugly".'
    )
    result = assess_answerability(SONGS_Q, DENIAL, [two], Policy())
    assert result is not None
    assert (result.confidence_class, result.candidate_count) == ("strong", 2)
    # one quoted candidate is not "more than one": medium
    one = make_ev(1, "Veronica Ballestrini", 'Veronica Ballestrini released "Amazing".')
    single = assess_answerability(SONGS_Q, DENIAL, [one], Policy())
    assert single is not None and single.confidence_class == "medium"


def test_generated_denials_file_is_its_scripts_output_and_scores_above_a_floor() -> None:
    """The measurement in docs/grounding.md: denials written apart from the grammar."""
    from pathlib import Path

    from bench.questions import denial_phrasings as dp

    rows = [json.loads(line) for line in Path(dp.OUT).read_text(encoding="utf-8").splitlines()]
    assert rows == dp.build(), "rerun the script"
    assert sum(r["denial"] for r in rows) >= 300 and sum(not r["denial"] for r in rows) >= 100
    heldout = dp.score(part="heldout")
    # Held-out denials were never used to change the grammar; the script prints the
    # figures (``python -m bench.questions.denial_phrasings --score``).
    assert heldout["tp"] / (heldout["tp"] + heldout["fn"]) >= 0.85
    assert heldout["tp"] / (heldout["tp"] + heldout["fp"]) >= 0.95


# ------------------------------------- denials nobody listed (docs/grounding.md, decision 11)


@pytest.mark.parametrize(
    "answer",
    [
        "I wasn't able to locate any of her songs in the passages.",
        "No titles are given for her.",
        "There doesn't seem to be anything about her songs.",
        "The passages cover her life, but it doesn't go into her specific works.",
        "There is nothing here that tells me which songs she recorded.",
        'The evidence mentions "Amazing" [E2], but I\'m not seeing any of her other songs.',
        "There are no specific songs listed for her.",
        "Not mentioned.",
        "I can't find her songs in these excerpts.",
        "The documents contain no information about her songs.",
    ],
)
def test_denials_nobody_listed_fire(answer: str) -> None:
    assert denial_of_answer(SONGS_Q, answer) is not None


MONA_LISA = make_ev(
    1,
    "Mona Lisa",
    "The Mona Lisa is a half-length portrait painting by Italian artist Leonardo da Vinci. "
    "It has been described as the best known work of art in the world.",
)


def test_an_answer_that_gave_the_fact_then_denies_a_side_detail_is_no_denial() -> None:
    question = "Who painted the Mona Lisa?"
    answer = "Leonardo da Vinci painted the Mona Lisa [E1]. I couldn't find anything about what it cost."
    assert denial_of_answer(question, answer) is None
    assert assess_answerability(question, answer, [MONA_LISA], Policy()) is None
    # a denial of the asked thing after a citation still counts
    other = "The passages describe the portrait [E1], but they do not name the painter."
    assert denial_of_answer(question, other) is not None


def test_a_candidate_the_answer_already_names_is_never_missed() -> None:
    question = "Who painted the Mona Lisa?"
    answer = "Leonardo da Vinci is named in the passages, but who painted it is not stated."
    found = assess_answerability(question, answer, [MONA_LISA], build_policy(
        {"answerability_threshold": "weak"}))  # fmt: skip
    assert found is None or all(
        "leonardo" not in s.text.casefold() for s in found.missed_answer_candidate_spans
    )


def test_names_with_lower_case_particles_are_candidates() -> None:
    block = make_ev(1, "Rebecca (novel)", "Rebecca is a 1938 Gothic novel written by English "
                    "author Daphne du Maurier, set in Cornwall.")  # fmt: skip
    found = assess_answerability("Who wrote Rebecca?", "The author is not mentioned.", [block],
                                 Policy())  # fmt: skip
    assert found is not None
    assert "Daphne du Maurier" in [s.text for s in found.missed_answer_candidate_spans]


@pytest.mark.parametrize(
    ("question", "subject"),
    [
        ("What ballets did Pyotr Ilyich Tchaikovsky compose?", ["pyotr", "ilyich", "tchaikovsky"]),
        ("What poetry collections did Sylvia Plath publish?", ["sylvia", "plath"]),
        ("Which essays did George Orwell write?", ["george", "orwell"]),
        ("Which short stories did Alice Munro write?", ["alice", "munro"]),
        ("What are Daphne du Maurier's best-known novels?", ["daphne", "du", "maurier"]),
    ],
)
def test_list_questions_are_extraction_shaped_and_their_nouns_leave_the_subject(
    question: str, subject: list[str]
) -> None:
    from qfarm.common.grounding.quantifier import classify_question_quantifier
    from qfarm.common.grounding.sidecar import match_extraction_shape, subject_tokens_for

    assert match_extraction_shape(question, classify_question_quantifier(question))[0] is not None
    assert subject_tokens_for(question) == subject


def test_who_designed_is_a_person_cue() -> None:
    from qfarm.common.grounding.quantifier import classify_question_quantifier
    from qfarm.common.grounding.sidecar import answer_type_for, match_extraction_shape

    q = "Who designed the Sydney Opera House?"
    shape, cue = match_extraction_shape(q, classify_question_quantifier(q))
    assert (shape, cue, answer_type_for(q, cue)) == ("cue", "who designed", "person")


def test_template_denials_are_the_scripts_output_and_the_held_out_part_clears_the_targets() -> None:
    """Denials and negations from slot templates written before the grammar's tables were
    read; the held-out file was never used to change the grammar."""
    from bench.questions import denial_templates as dt

    for path, rows in ((dt.TUNE_OUT, dt.build(dt.TUNE_DENIALS, dt.TUNE_NEGATIONS, "tune")),
                       (dt.HELDOUT_OUT, dt.build(dt.HELDOUT_DENIALS, dt.HELDOUT_NEGATIONS,
                                                 "heldout"))):  # fmt: skip
        assert [json.loads(line) for line in path.read_text().splitlines()] == rows, "rerun it"
    recall, precision = dt.rates(dt.score(dt.HELDOUT_OUT))
    assert recall >= 0.9 and precision >= 0.97


def test_the_opt_in_demotion_labels_a_flagged_row_evidence_missed_partial() -> None:
    """Off by default: the sidecar reports and moves nothing; with
    ``answerability_demote_enabled`` a flagged STRICT row is HYBRID, EVIDENCE-MISSED-PARTIAL."""
    from qfarm.common.grounding.sidecar import demote_for_missed_evidence
    from qfarm.common.models import Label, Verdict, Verification

    answer = '"Amazing" [E2] is one of her songs; her other songs are not mentioned.'
    strict = Verification(verdict=Verdict.STRICT, label=Label.EVIDENCE_WARRANTED, n_claims=1,
                          n_verified=1, ratio=1.0)  # fmt: skip
    found = assess_answerability(SONGS_Q, answer, [BALLESTRINI], Policy())
    assert found is not None
    assert demote_for_missed_evidence(strict, found, Policy()) is strict
    on = build_policy({"answerability_demote_enabled": True})
    demoted = demote_for_missed_evidence(strict, found, on)
    assert (demoted.verdict, demoted.label) == (Verdict.HYBRID, Label.EVIDENCE_MISSED_PARTIAL)
    assert demoted.tails[-1] == "evidence missed"
    assert demote_for_missed_evidence(strict, None, on) is strict
    failed = Verification()  # UNGROUNDED stays UNGROUNDED
    assert demote_for_missed_evidence(failed, found, on).label == Label.UNGROUNDED
