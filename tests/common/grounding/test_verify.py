"""The verifier of docs/grounding.md, 'Verification': each violation kind fires on a minimal answer and not on a
near miss; the verdict and label of each; hand-written answers of each shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.grounding.verify.verdict import display_label
from qfarm.common.models import Evidence, Label, Mode, Verdict, Verification, ViolationKind
from qfarm.common.policy import Policy, build_policy
from tests.common.passages import passage

K = ViolationKind
POINTER = Mode.CLAIM_LATTICE_POINTER
JSON = Mode.CLAIM_LATTICE
QUOTE = Mode.QUOTE


def make_ev(i: int, title: str, text: str) -> Evidence:
    doc_id = title.lower().replace(" ", "_")
    return passage(i, title, text, doc_id=doc_id, chunk_id=f"{title}:0", score=10.0 - i)


EVIDENCE = (
    make_ev(
        1,
        "The Beatles",
        "The Beatles were an English rock band formed in Liverpool in 1960. The band comprised "
        "John Lennon, Paul McCartney, George Harrison and Ringo Starr. They are regarded as the "
        "most influential band in popular music.",
    ),
    make_ev(
        2,
        "Paris",
        'Paris is the capital and largest city of France. Nicknamed the "City of Light", Paris '
        "is a major centre of finance, diplomacy and culture.",
    ),
    make_ev(
        3,
        "Liverpool",
        "Liverpool is a city and metropolitan borough in Merseyside, England. It is known for "
        "its football clubs and as the birthplace of the Beatles.",
    ),
    make_ev(
        4,
        "Ringo Starr",
        "Ringo Starr is an English musician who achieved international fame as the drummer "
        "for the Beatles.",
    ),
)
BEATLES_Q = "Who were the Beatles?"
GOOD_1 = "The Beatles were an English rock band formed in Liverpool in 1960. [E1]"
GOOD_2 = "The band comprised John Lennon, Paul McCartney, George Harrison and Ringo Starr. [E1]"
GOOD_3 = "Ringo Starr achieved international fame as the drummer for the Beatles. [E4]"


def verify(
    answer: str,
    question: str = BEATLES_Q,
    mode: Mode = POINTER,
    policy: Policy | None = None,
    profile: str = "default",
    **overrides: Any,
) -> Verification:
    policy = policy or build_policy(overrides)
    pre = run_preflight(question, mode, policy, profile)
    return verify_answer(
        answer, question=question, mode=mode, evidence=EVIDENCE, policy=policy, preflight=pre
    )


def json_answer(*claims: tuple[str, list[str], str | None]) -> str:
    items = []
    for text, ids, warrant in claims:
        item: dict[str, Any] = {"claim": text, "evidence": ids}
        if warrant is not None:
            item["warrant"] = warrant
        items.append(item)
    return json.dumps({"claims": items})


def outcome(v: Verification) -> tuple[Verdict, Label]:
    return v.verdict, v.label


# --------------------------------------------------------------------------- basics


def test_clean_pointer_answer_is_strict_and_evidence_warranted() -> None:
    v = verify(f"{GOOD_1}\n- {GOOD_2}")
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)
    assert (v.n_claims, v.n_verified, v.ratio) == (2, 2, 1.0)
    assert v.violation_kinds == ()
    assert v.tails == ()
    assert all(c.verified and c.anchored and c.admitted for c in v.claims)


def test_clean_json_answer_is_strict() -> None:
    answer = json_answer(
        (
            "Paris is the capital of France",
            ["E2"],
            "Paris is the capital and largest city of France",
        )
    )
    v = verify(f"```json\n{answer}\n```", "What is the capital of France?", JSON)
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)
    assert v.claims[0].warrant == "Paris is the capital and largest city of France"


def test_clean_quote_answer_is_strict() -> None:
    v = verify('"Paris is the capital and largest city of France" [E2]', "What is Paris?", QUOTE)
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)
    assert v.quote_match_layers == {"exact": 1, "normalized": 0, "fuzzy": 0, "unmatched": 0}


def test_hybrid_answer_mixes_verified_and_unverified_claims() -> None:
    v = verify(f"{GOOD_1}\nParis is the capital and largest city of France. [E1]")
    assert v.verdict is Verdict.HYBRID
    assert (v.n_claims, v.n_verified, v.ratio) == (2, 1, 0.5)
    assert K.CITATION_MISMATCH in v.violation_kinds


def test_untagged_prose_is_ungrounded() -> None:
    v = verify("The Beatles were a famous English rock band from Liverpool.")
    assert outcome(v) == (Verdict.UNGROUNDED, Label.UNGROUNDED)
    assert v.violation_kinds == (K.NO_EVIDENCE_POINTER,)
    assert v.format_collapsed is False


def test_broken_json_is_ungrounded_schema_invalid() -> None:
    v = verify('{"claims": [{"claim": "Paris is the capital', "What is Paris?", JSON)
    assert outcome(v) == (Verdict.UNGROUNDED, Label.UNGROUNDED)
    assert v.violation_kinds == (K.SCHEMA_INVALID,)
    assert v.n_claims == 0


# --------------------------------------------------------------------------- kind by kind


def test_no_evidence_pointer_fires_on_a_meaningful_untagged_line() -> None:
    v = verify(f"{GOOD_1}\nThey sold more records than anyone else.")
    assert K.NO_EVIDENCE_POINTER in v.violation_kinds
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert (v.n_claims, v.n_verified) == (2, 1)
    assert "untagged lines" in v.tails


def test_no_evidence_pointer_near_miss_short_untagged_line_is_ignored() -> None:
    v = verify(f"Here is the answer:\n{GOOD_1}")  # 19 characters: not meaningful
    assert K.NO_EVIDENCE_POINTER not in v.violation_kinds
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)
    assert v.n_claims == 1


def test_format_collapsed_fires_on_three_meaningful_lines_without_tags() -> None:
    answer = (
        "The Beatles were a band.\nThey came from Liverpool in England.\nThey had four members."
    )
    v = verify(answer)
    assert v.format_collapsed is True
    assert K.FORMAT_COLLAPSED in v.violation_kinds
    assert outcome(v) == (Verdict.UNGROUNDED, Label.UNGROUNDED)
    assert v.tails[0] == "format collapsed"


def test_format_collapsed_near_misses() -> None:
    two_lines = verify("The Beatles were a band.\nThey came from Liverpool in England.")
    assert K.FORMAT_COLLAPSED not in two_lines.violation_kinds
    one_tag = verify(f"The Beatles were a band.\nThey came from Liverpool in England.\n{GOOD_1}")
    assert K.FORMAT_COLLAPSED not in one_tag.violation_kinds
    assert one_tag.verdict is Verdict.HYBRID
    answer = (
        "The Beatles were a band.\nThey came from Liverpool in England.\nThey had four members."
    )
    disabled = verify(answer, format_collapse_check_enabled=False)
    assert K.FORMAT_COLLAPSED not in disabled.violation_kinds
    assert disabled.format_collapsed is False


def test_format_collapsed_in_json_mode_means_prose_instead_of_json() -> None:
    prose = "Paris is the capital of France.\nIt is called the City of Light.\nIt is a centre of finance."
    v = verify(prose, "What is Paris?", JSON)
    assert {K.FORMAT_COLLAPSED, K.SCHEMA_INVALID} <= set(v.violation_kinds)
    truncated = (
        '{\n  "claims": [\n    {"claim": "Paris is the capital of France",\n     "evidence": ["E2"'
    )
    t = verify(truncated, "What is Paris?", JSON)
    assert K.FORMAT_COLLAPSED not in t.violation_kinds
    assert t.violation_kinds == (K.SCHEMA_INVALID,)


def test_schema_invalid_fires_on_a_tag_with_no_claim_text() -> None:
    v = verify(f"{GOOD_1}\n[E1]")
    assert K.SCHEMA_INVALID in v.violation_kinds
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert v.claims[1].problems == ("SCHEMA_INVALID",)


def test_schema_invalid_fires_under_min_content_tokens_and_near_miss_at_the_minimum() -> None:
    short = verify("Formed in 1960. [E1]")  # content tokens: formed, 1960
    assert short.violation_kinds == (K.SCHEMA_INVALID,)
    assert short.verdict is Verdict.UNGROUNDED
    exact = verify("Formed in Liverpool in 1960. [E1]")  # formed, liverpool, 1960
    assert K.SCHEMA_INVALID not in exact.violation_kinds
    assert exact.verdict is Verdict.STRICT
    relaxed = verify("Formed in 1960. [E1]", min_claim_content_tokens=2)
    assert K.SCHEMA_INVALID not in relaxed.violation_kinds


def test_schema_invalid_json_item_of_the_wrong_shape() -> None:
    good = {
        "claim": "Paris is the capital of France",
        "evidence": ["E2"],
        "warrant": "Paris is the capital and largest city of France",
    }
    answer = json.dumps({"claims": [good, "just a string", {"evidence": ["E2"]}]})
    v = verify(answer, "What is Paris?", JSON)
    assert (v.n_claims, v.n_verified) == (3, 1)
    assert K.SCHEMA_INVALID in v.violation_kinds
    assert v.verdict is Verdict.HYBRID  # parseable JSON: only the bad items are unverified


def test_json_of_the_wrong_shape_has_no_claims() -> None:
    v = verify('{"answer": "Paris"}', "What is Paris?", JSON)
    assert v.violation_kinds == (K.SCHEMA_INVALID,)
    assert outcome(v) == (Verdict.UNGROUNDED, Label.UNGROUNDED)


def test_citation_mismatch_fires_under_half_and_near_miss_at_exactly_half() -> None:
    # content tokens: liverpool, band, loved, purple, elephants → 2 of 5 in E1: under half
    under = verify("Liverpool band loved purple elephants. [E1]")
    assert under.violation_kinds == (K.CITATION_MISMATCH,)
    assert outcome(under) == (Verdict.UNGROUNDED, Label.UNGROUNDED)
    # + beatles → 3 of 6: exactly half passes
    half = verify("Liverpool band Beatles loved purple elephants. [E1]")
    assert K.CITATION_MISMATCH not in half.violation_kinds
    assert half.claims[0].verified is True


def test_citation_mismatch_on_the_wrong_block() -> None:
    v = verify(f"{GOOD_1}\nParis is the capital and largest city of France. [E3]")
    assert v.claims[1].problems == ("CITATION_MISMATCH",)
    assert v.verdict is Verdict.HYBRID


def test_title_mismatch_fires_when_no_cited_title_shares_a_token() -> None:
    answer = "It is known for its football clubs and as the birthplace. [E3]"
    v = verify(answer, "What is the city famous for?")
    assert v.violation_kinds == (K.TITLE_MISMATCH,)
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert "title mismatch" in v.tails


def test_title_mismatch_near_miss_title_token_in_the_question() -> None:
    answer = "It is known for its football clubs and as the birthplace. [E3]"
    v = verify(answer, "What is Liverpool famous for?")
    assert v.violation_kinds == ()
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)


def test_too_many_claims_excess_not_admitted() -> None:
    v = verify(f"{GOOD_1}\n{GOOD_2}\n{GOOD_3}", claim_lattice_max_claims_per_answer=2)
    assert v.violation_kinds == (K.TOO_MANY_CLAIMS,)
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert (v.n_claims, v.n_verified) == (2, 2)
    assert [c.admitted for c in v.claims] == [True, True, False]
    assert v.claims[2].problems == ("TOO_MANY_CLAIMS",)


def test_too_many_claims_near_miss_at_the_cap() -> None:
    v = verify(f"{GOOD_1}\n{GOOD_2}", claim_lattice_max_claims_per_answer=2)
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)


def test_too_many_claims_does_not_cap_quote_mode_by_default() -> None:
    quotes = (
        '"The Beatles were an English rock band" [E1]\n"Paris is the capital and largest city" [E2]'
    )
    v = verify(quotes, BEATLES_Q, QUOTE, claim_lattice_max_claims_per_answer=1)
    assert K.TOO_MANY_CLAIMS not in v.violation_kinds
    assert v.n_claims == 2


def test_too_many_evidence_ids_fires_above_the_maximum() -> None:
    v = verify("The Beatles were an English rock band formed in Liverpool. [E1, E2, E3, E4]")
    assert v.violation_kinds == (K.TOO_MANY_EVIDENCE_IDS,)
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)


def test_too_many_evidence_ids_near_miss_at_the_maximum() -> None:
    v = verify("The Beatles were an English rock band formed in Liverpool. [E1, E3, E4]")
    assert v.violation_kinds == ()
    assert v.verdict is Verdict.STRICT


def test_pointer_overflow_trimmed_drops_unknown_ids() -> None:
    v = verify("The Beatles were an English rock band formed in Liverpool. [E1, E9]")
    assert v.violation_kinds == (K.POINTER_OVERFLOW_TRIMMED,)
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert v.claims[0].evidence_ids == ("E1",)
    assert "pointer trimmed" in v.tails


def test_pointer_overflow_near_miss_ids_in_range() -> None:
    v = verify("The Beatles were an English rock band formed in Liverpool. [E1, E3]")
    assert v.violation_kinds == ()


def test_pointer_overflow_when_every_id_is_unknown_leaves_the_claim_unverified() -> None:
    v = verify("The Beatles were an English rock band formed in Liverpool. [E0]")
    assert set(v.violation_kinds) == {K.POINTER_OVERFLOW_TRIMMED, K.CITATION_MISMATCH}
    assert v.verdict is Verdict.UNGROUNDED


def test_warrant_missing_in_pointer_mode_without_a_four_token_run() -> None:
    v = verify("Liverpool formed Beatles band 1960. [E1]")  # every token is there, no run of 4
    assert v.violation_kinds == (K.WARRANT_MISSING,)
    assert outcome(v) == (Verdict.STRICT, Label.POINTER_LINKED)
    assert v.claims[0].verified is True and v.claims[0].anchored is False
    assert "warrant missing" in v.tails


def test_warrant_missing_near_miss_pointer_with_a_four_token_run() -> None:
    v = verify("The Beatles formed in Liverpool in 1960. [E1]")  # "formed in liverpool in"
    assert v.violation_kinds == ()
    assert v.claims[0].anchored is True


def test_a_run_of_stop_words_is_no_anchor() -> None:
    v = verify("Beatles music was one of the most loved band sounds. [E1]")
    assert K.WARRANT_MISSING in v.violation_kinds  # "one of the most" is not an anchor


def test_warrant_missing_in_json_mode_when_the_warrant_is_not_verbatim() -> None:
    answer = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1"], "The Beatles came from Liverpool")
    )
    v = verify(answer, BEATLES_Q, JSON)
    assert v.violation_kinds == (K.WARRANT_MISSING,)
    assert outcome(v) == (Verdict.STRICT, Label.POINTER_LINKED)
    missing = verify(
        json_answer(("The Beatles formed in Liverpool in 1960", ["E1"], None)), BEATLES_Q, JSON
    )
    assert missing.violation_kinds == (K.WARRANT_MISSING,)


def test_warrant_missing_near_miss_json_verbatim_modulo_case_and_spacing() -> None:
    answer = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1"], "formed  in LIVERPOOL in 1960.")
    )
    v = verify(answer, BEATLES_Q, JSON)
    assert outcome(v) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)


def test_warrant_in_an_uncited_block_is_no_anchor() -> None:
    answer = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1"], "birthplace of the Beatles")
    )
    assert verify(answer, BEATLES_Q, JSON).violation_kinds == (K.WARRANT_MISSING,)


def test_lazy_anchor_fires_when_the_warrant_shares_no_content_token() -> None:
    answer = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1"], "regarded as the most influential band")
    )
    v = verify(answer, BEATLES_Q, JSON)
    assert v.violation_kinds == (K.LAZY_ANCHOR_DEMOTE,)
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert "lazy anchor" in v.tails


def test_lazy_anchor_near_miss_warrant_shares_a_content_token() -> None:
    answer = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1"], "formed in Liverpool in 1960")
    )
    assert verify(answer, BEATLES_Q, JSON).violation_kinds == ()


@pytest.mark.parametrize(
    ("mode", "answer"),
    [
        (POINTER, "The evidence does not mention who the Beatles were."),
        (POINTER, "I'm sorry, I cannot answer this from the provided evidence."),
        (JSON, "I cannot answer: the evidence is not provided."),
        (JSON, '{"claims": [], "note": "not mentioned in the evidence"}'),
        (QUOTE, 'The answer is not in the evidence; no "quote" fits.'),
    ],
)
def test_deflection_detected_on_a_refusal_without_claims(mode: Mode, answer: str) -> None:
    v = verify(answer, BEATLES_Q, mode)
    assert K.DEFLECTION_DETECTED in v.violation_kinds
    assert outcome(v) == (Verdict.UNGROUNDED, Label.UNGROUNDED)
    assert v.n_claims == 0


@pytest.mark.parametrize(
    "answer",
    [
        "I'm sorry, but I cannot answer this from the evidence.",
        "Sorry, but the evidence does not mention who the Beatles were.",
        "The band is famous. But the evidence does not mention who the Beatles were.",
    ],
)
def test_a_refusal_after_but_without_a_statement_is_still_a_deflection(answer: str) -> None:
    assert K.DEFLECTION_DETECTED in verify(answer, BEATLES_Q, POINTER).violation_kinds


@pytest.mark.parametrize(
    ("mode", "answer", "kinds"),
    [
        # After a real model's answers: the answer, then a caveat about a detail.
        (JSON, "The Beatles formed in Liverpool in 1960, but it does not specify how the band "
               "chose its name.", (K.SCHEMA_INVALID,)),
        (POINTER, "The Beatles were an English rock band, but their later albums are not "
                  "mentioned.", (K.NO_EVIDENCE_POINTER,)),
    ],
)
def test_a_refusal_phrase_after_but_and_a_statement_is_a_hedge(
    mode: Mode, answer: str, kinds: tuple[ViolationKind, ...]
) -> None:
    v = verify(answer, BEATLES_Q, mode)
    assert v.violation_kinds == kinds and v.verdict is Verdict.UNGROUNDED


def test_deflection_near_miss_refusal_phrase_beside_a_tagged_claim() -> None:
    v = verify(f"{GOOD_1}\nTheir later albums are not mentioned here.")
    assert K.DEFLECTION_DETECTED not in v.violation_kinds
    assert v.verdict is Verdict.HYBRID


BROAD_BOUNDED = "List all members of the Beatles"
BROAD_UNBOUNDED = "Tell me about the Beatles"
CAPS = {"quantifier_guard_apply_caps": True}  # the broad kinds fire and demote only with caps applied


def test_broad_runaway_fires_when_lines_exceed_twice_the_tags() -> None:
    answer = f"{GOOD_2}\nThey also had many other friends in the band.\nThey had managers and producers too."
    v = verify(answer, BROAD_BOUNDED, **CAPS)
    assert K.BROAD_QUANTIFIER_RUNAWAY in v.violation_kinds
    assert outcome(v) == (Verdict.HYBRID, Label.POINTER_LINKED)
    assert "broad runaway" in v.tails


def test_broad_runaway_near_misses() -> None:
    answer = f"{GOOD_2}\nThey also had many other friends in the band."
    v = verify(answer, BROAD_BOUNDED, **CAPS)  # 2 lines, 1 tag: not more than twice
    assert K.BROAD_QUANTIFIER_RUNAWAY not in v.violation_kinds
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    narrow = f"{GOOD_2}\nThey also had many other friends in the band.\nThey had managers and producers too."
    assert K.BROAD_QUANTIFIER_RUNAWAY not in verify(narrow, BEATLES_Q, **CAPS).violation_kinds


def test_broad_runaway_in_json_mode_counts_items_without_ids() -> None:
    items = [
        (
            "The band comprised John Lennon and Paul McCartney",
            ["E1"],
            "The band comprised John Lennon",
        )
    ]
    items += [(f"Unsupported statement number {n} about the band", [], None) for n in range(3)]
    v = verify(json_answer(*items), BROAD_BOUNDED, JSON, **CAPS)
    assert K.BROAD_QUANTIFIER_RUNAWAY in v.violation_kinds
    assert (
        K.BROAD_QUANTIFIER_RUNAWAY
        not in verify(json_answer(*items[:2]), BROAD_BOUNDED, JSON, **CAPS).violation_kinds
    )


def test_broad_cap_applied_when_an_enforced_profile_cap_cuts_claims() -> None:
    v = verify(
        f"{GOOD_1}\n{GOOD_2}\n{GOOD_3}",
        BROAD_BOUNDED,
        quantifier_guard_apply_caps=True,
        quantifier_caps_by_intensity={"ALL": 2},
    )
    assert set(v.violation_kinds) == {K.BROAD_QUANTIFIER_CAP_APPLIED, K.TOO_MANY_CLAIMS}
    # every admitted claim verifies, yet a trimmed broad answer is a sample: BROAD-CAPPED
    assert all(c.verified for c in v.claims if c.admitted)
    assert outcome(v) == (Verdict.HYBRID, Label.BROAD_CAPPED)
    assert "broad cap 2" in v.tails
    assert v.n_claims == 2


def test_broad_cap_applied_with_the_hermes_profile_states_cap_8() -> None:
    lines = "\n".join([GOOD_1, GOOD_2, GOOD_3] * 3)  # 9 claims
    v = verify(lines, BROAD_BOUNDED, profile="hermes-3-8b", quantifier_guard_apply_caps=True)
    assert K.BROAD_QUANTIFIER_CAP_APPLIED in v.violation_kinds
    assert "broad cap 8" in v.tails
    assert v.n_claims == 8


def test_a_trimmed_broad_answer_without_anchors_stays_pointer_linked() -> None:
    unanchored = "Liverpool band Beatles were English rockers from 1960 [E1]"
    v = verify(
        "\n".join([unanchored] * 3),
        BROAD_BOUNDED,
        quantifier_guard_apply_caps=True,
        quantifier_caps_by_intensity={"ALL": 2},
    )
    assert K.BROAD_QUANTIFIER_CAP_APPLIED in v.violation_kinds
    assert v.label is Label.POINTER_LINKED
    assert display_label(v.label, v.violation_kinds) == "BROAD-CAPPED · POINTER-LINKED"
    untrimmed = verify(unanchored, BROAD_BOUNDED, **CAPS)
    assert display_label(untrimmed.label, untrimmed.violation_kinds) == "POINTER-LINKED"
    capped = verify(f"{GOOD_1}\n{GOOD_2}\n{GOOD_3}", BROAD_BOUNDED, quantifier_caps_by_intensity={"ALL": 2}, **CAPS)
    assert display_label(capped.label, capped.violation_kinds) == "BROAD-CAPPED"


@pytest.mark.parametrize(
    ("question", "profile"),
    [
        ("What is the capital of France?", "hermes-3-8b"),  # SINGULAR: table 1
        ("Which countries have no coastline?", "default"),  # ABSENT: table 1
    ],
)
def test_caps_applied_never_tighten_a_question_that_is_not_broad(
    question: str, profile: str
) -> None:
    answer = "\n".join([GOOD_1] * 13)
    v = verify(answer, question, profile=profile, quantifier_guard_apply_caps=True)
    assert v.n_claims == 12  # the policy default, not the table's 1
    assert K.BROAD_QUANTIFIER_CAP_APPLIED not in v.violation_kinds
    listed = verify(
        answer,
        question,
        profile=profile,
        quantifier_guard_apply_caps=True,
        quantifier_caps_by_intensity={"SINGULAR": 1, "ABSENT": 1},
    )
    assert listed.n_claims == 1  # the operator listed the rung: its cap is enforced


def test_caps_applied_keep_proportional_at_its_profile_cap() -> None:
    answer = "\n".join([GOOD_1] * 13)
    question = "What did most of the settlers grow?"
    small = verify(answer, question, profile="hermes-3-8b", quantifier_guard_apply_caps=True)
    large = verify(answer, question, profile="default", quantifier_guard_apply_caps=True)
    assert (small.n_claims, large.n_claims) == (1, 3)


def test_allow_broad_turns_cap_reduction_off_for_broad_rungs() -> None:
    lines = "\n".join([GOOD_1, GOOD_2, GOOD_3] * 3)  # 9 claims, Hermes ALL cap is 8
    v = verify(
        lines,
        BROAD_BOUNDED,
        profile="hermes-3-8b",
        quantifier_guard_apply_caps=True,
        allow_broad=True,
    )
    assert v.n_claims == 9
    assert K.BROAD_QUANTIFIER_CAP_APPLIED not in v.violation_kinds
    assert v.label is Label.EXPLORATORY


def test_broad_cap_near_misses() -> None:
    within = verify(
        f"{GOOD_1}\n{GOOD_2}",
        BROAD_BOUNDED,
        quantifier_guard_apply_caps=True,
        quantifier_caps_by_intensity={"ALL": 2},
    )
    assert within.violation_kinds == ()
    assert outcome(within) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)
    reported_only = verify(
        f"{GOOD_1}\n{GOOD_2}\n{GOOD_3}", BROAD_BOUNDED, quantifier_caps_by_intensity={"ALL": 2}
    )
    assert reported_only.violation_kinds == ()  # cap reported, not applied
    default_cap = verify("\n".join([GOOD_1] * 13), BROAD_BOUNDED, quantifier_guard_apply_caps=True)
    # ALL's default-profile cap (12) is not below the global default (12): plain TOO_MANY_CLAIMS
    assert K.BROAD_QUANTIFIER_CAP_APPLIED not in default_cap.violation_kinds
    assert K.TOO_MANY_CLAIMS in default_cap.violation_kinds


def test_broad_scope_unbound_soft_demotes() -> None:
    v = verify(GOOD_1, BROAD_UNBOUNDED, **CAPS)
    assert v.violation_kinds == (K.BROAD_QUANTIFIER_SCOPE_UNBOUND,)
    assert outcome(v) == (Verdict.HYBRID, Label.ANCHOR_WARRANTED)
    assert v.tails == ("broad unbounded",)
    assert v.would_fire_kinds == ()  # it fired: nothing is left to record as "would"


def test_broad_scope_unbound_near_misses() -> None:
    assert verify(GOOD_2, BROAD_BOUNDED, **CAPS).violation_kinds == ()
    off = verify(GOOD_1, BROAD_UNBOUNDED, quantifier_guard_enabled=False, **CAPS)
    assert off.violation_kinds == off.would_fire_kinds == ()
    unguarded_mode = verify(
        GOOD_1, BROAD_UNBOUNDED, quantifier_guard_modes=["claim_lattice"], **CAPS
    )
    assert unguarded_mode.violation_kinds == unguarded_mode.would_fire_kinds == ()


RUNAWAY = f"{GOOD_2}\nThey also had many other friends in the band.\nThey had managers and producers too."


@pytest.mark.parametrize(
    ("answer", "question", "overrides", "would_fire"),
    [
        (GOOD_1, BROAD_UNBOUNDED, {}, {K.BROAD_QUANTIFIER_SCOPE_UNBOUND}),
        (RUNAWAY, BROAD_BOUNDED, {}, {K.BROAD_QUANTIFIER_RUNAWAY}),
        (
            f"{GOOD_1}\n{GOOD_2}\n{GOOD_3}",
            BROAD_BOUNDED,
            {"quantifier_caps_by_intensity": {"ALL": 2}},
            {K.BROAD_QUANTIFIER_CAP_APPLIED},
        ),
        (
            "\n".join([GOOD_1, GOOD_2, GOOD_3] * 3),
            "Tell me everything about the Beatles",
            {},
            {K.BROAD_QUANTIFIER_SCOPE_UNBOUND},  # 9 claims under the default profile's cap of 15
        ),
    ],
)
def test_the_dry_run_records_broad_kinds_and_moves_no_verdict(
    answer: str, question: str, overrides: dict[str, Any], would_fire: set[K]
) -> None:
    """Caps off (the default): the guard's kinds are recorded, the grade equals a guard-off one."""
    dry = verify(answer, question, **overrides)
    off = verify(answer, question, quantifier_guard_enabled=False, **overrides)
    assert set(dry.would_fire_kinds) == would_fire
    assert dry.model_dump(exclude={"would_fire_kinds"}) == off.model_dump(
        exclude={"would_fire_kinds"}
    )
    assert off.would_fire_kinds == ()
    enforced = verify(answer, question, **CAPS, **overrides)
    assert would_fire <= set(enforced.violation_kinds)
    assert outcome(enforced) != outcome(dry)


def test_the_dry_run_would_fire_cap_applied_only_below_the_default_cap() -> None:
    nine = "\n".join([GOOD_1, GOOD_2, GOOD_3] * 3)
    hermes = verify(nine, BROAD_BOUNDED, profile="hermes-3-8b")  # ALL: 8 < 12, 9 claims
    assert K.BROAD_QUANTIFIER_CAP_APPLIED in hermes.would_fire_kinds
    assert K.TOO_MANY_CLAIMS not in hermes.violation_kinds and hermes.n_claims == 9
    default = verify(nine, BROAD_BOUNDED)  # ALL: 12, not below the default
    assert K.BROAD_QUANTIFIER_CAP_APPLIED not in default.would_fire_kinds


def test_broad_kinds_never_fire_in_quote_mode_by_default() -> None:
    v = verify('"The Beatles were an English rock band" [E1]', BROAD_UNBOUNDED, QUOTE)
    assert v.violation_kinds == ()
    assert v.verdict is Verdict.STRICT


def test_broad_rejected_only_with_reject_broad() -> None:
    rejected = verify(GOOD_1, BROAD_UNBOUNDED, quantifier_reject_broad=True)
    assert rejected.violation_kinds == (K.BROAD_QUANTIFIER_REJECTED,)
    assert outcome(rejected) == (Verdict.UNGROUNDED, Label.BROAD_REJECTED)
    assert K.BROAD_QUANTIFIER_REJECTED not in verify(GOOD_1, BROAD_UNBOUNDED).violation_kinds


# --------------------------------------------------------------------------- labels


def test_exploratory_label_on_allow_broad() -> None:
    v = verify(GOOD_1, BROAD_UNBOUNDED, allow_broad=True)
    assert outcome(v) == (Verdict.STRICT, Label.EXPLORATORY)  # the dry run demotes nothing
    assert outcome(verify(GOOD_1, BROAD_UNBOUNDED, allow_broad=True, **CAPS)) == (
        Verdict.HYBRID,
        Label.EXPLORATORY,
    )
    assert v.tails[-1] == "not evidence-warranted"
    narrow = verify(GOOD_1, BEATLES_Q, allow_broad=True)
    assert narrow.label is Label.EVIDENCE_WARRANTED


def test_exploratory_keeps_ungrounded_visible() -> None:
    v = verify("I'm sorry, the evidence does not mention it.", BROAD_UNBOUNDED, allow_broad=True)
    assert outcome(v) == (Verdict.UNGROUNDED, Label.UNGROUNDED)


def test_broad_bounded_output_is_evidence_warranted_only_when_every_check_passes() -> None:
    clean = verify(GOOD_2, BROAD_BOUNDED)
    assert clean.label is Label.EVIDENCE_WARRANTED
    demoted = verify(
        "It is known for its football clubs and as the birthplace. [E3]", BROAD_BOUNDED
    )
    assert K.TITLE_MISMATCH in demoted.violation_kinds
    assert demoted.label is not Label.EVIDENCE_WARRANTED


def test_hybrid_with_an_unanchored_verified_claim_is_pointer_linked() -> None:
    v = verify("Liverpool formed Beatles band 1960. [E1]\nThey sold more records than anyone else.")
    assert outcome(v) == (Verdict.HYBRID, Label.POINTER_LINKED)


def test_violation_kinds_are_sorted_and_unique() -> None:
    answer = "\n".join(
        ["Paris is the capital and largest city of France. [E1]"] * 3 + ["[E9]", "x" * 30]
    )
    v = verify(answer)
    assert list(v.violation_kinds) == sorted(set(v.violation_kinds))
    assert len(v.violation_kinds) >= 3


# --------------------------------------------------------------------------- diagnostics


def test_bracket_diagnostics() -> None:
    answer = (
        f"{GOOD_1}\nThe band comprised four members. [E1, E4]\nSee the [note] and [E2] there\nok"
    )
    v = verify(answer)
    assert v.answer_brackets == 4  # [E1], [E1, E4], [note], [E2]
    assert v.answer_pointer_count == 3  # distinct ids: E1, E4, E2
    assert v.answer_chars_with_brackets == len("E1" "E1, E4" "note" "E2")
    assert v.raw_meaningful_line_count == 3


def test_answer_brackets_is_zero_outside_the_lattice_modes() -> None:
    quote = verify('"The Beatles were an English rock band" [E1] and [note]', BEATLES_Q, QUOTE)
    assert quote.answer_brackets == 0
    assert quote.answer_pointer_count == 1  # the ids a quote answer cites are still counted
    assert verify(GOOD_1, BEATLES_Q, POINTER).answer_brackets == 1


def test_json_pointer_count_counts_listed_evidence_ids() -> None:
    answer = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1", "E3"], "formed in Liverpool in 1960"),
        ("Paris is the capital of France", ["E2"], "Paris is the capital"),
    )
    assert verify(answer, BEATLES_Q, JSON).answer_pointer_count == 3
    repeated = json_answer(
        ("The Beatles formed in Liverpool in 1960", ["E1", "E3"], "formed in Liverpool in 1960"),
        ("The Beatles are from Liverpool", ["E1"], "Liverpool"),
    )
    assert verify(repeated, BEATLES_Q, JSON).answer_pointer_count == 2


def test_pointer_count_is_distinct_ids_and_chars_are_those_inside_brackets() -> None:
    answer = f"{GOOD_2[:-5]} [E2, E5]\n{GOOD_1[:-5]} [E2]"
    v = verify(answer)
    assert v.answer_pointer_count == 2  # [E2, E5] + [E2]
    assert v.answer_chars_with_brackets == len("E2, E5") + len("E2")


@pytest.mark.parametrize(
    "tag",
    ["[E1]", "[e1]", "[E01]", "[ E1 ]", "[E1,E3]", "[E1; E3]", "[E1 and E3]"],
)
def test_tag_spellings_are_recognized(tag: str) -> None:
    v = verify(f"The Beatles were an English rock band formed in Liverpool {tag}")
    assert v.claims[0].evidence_ids[0] == "E1"
    assert v.verdict is Verdict.STRICT


@pytest.mark.parametrize("not_a_tag", ["(E1)", "E1", "[Evidence 1]", "{E1}"])
def test_non_tags_leave_the_line_untagged(not_a_tag: str) -> None:
    v = verify(f"The Beatles were an English rock band formed in Liverpool {not_a_tag}")
    assert K.NO_EVIDENCE_POINTER in v.violation_kinds


def test_verify_without_a_preflight_classifies_the_question_itself() -> None:
    v = verify_answer(
        GOOD_1, question=BROAD_UNBOUNDED, mode=POINTER, evidence=EVIDENCE, policy=Policy()
    )
    assert K.BROAD_QUANTIFIER_SCOPE_UNBOUND in v.would_fire_kinds


def test_gold_fields_are_left_for_the_gold_matcher() -> None:
    v = verify(GOOD_1)
    assert v.gold_in_claims is None and v.gold_in_evidence is None
