"""Quantifier preflight: caps reported/enforced, reject-broad, exploratory, the reminder."""

from __future__ import annotations

import pytest

from qfarm.common.grounding.preflight import rejected_verification, run_preflight
from qfarm.common.grounding.prompts import GROUNDING_REMINDERS, build_prompt
from qfarm.common.grounding.reminders import (
    BOUNDED_TEMPLATE,
    UNBOUNDED_TEMPLATE,
    render_quantifier_reminder,
)
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import Evidence, Label, Mode, Verdict, ViolationKind
from qfarm.common.policy import Policy, build_policy

POINTER = Mode.CLAIM_LATTICE_POINTER
BROAD_UNBOUNDED = "Tell me about the history of jazz"
BOUNDED_UNIVERSAL = "List all members of the Beatles"


def test_cap_is_reported_even_when_not_enforced() -> None:
    pre = run_preflight("List all songs by Queen", POINTER, Policy(), "hermes-3-8b")
    assert pre.claim_cap == 8
    assert pre.cap_enforced is False
    assert pre.guard_active is True


def test_cap_enforced_only_with_apply_caps_and_a_guarded_mode() -> None:
    policy = build_policy({"quantifier_guard_apply_caps": True})
    assert run_preflight("List all songs", POINTER, policy, "default").cap_enforced is True
    # quote mode is unguarded by default: the cap is reported, not enforced
    quote = run_preflight("List all songs", Mode.QUOTE, policy, "default")
    assert (quote.cap_enforced, quote.guard_active, quote.claim_cap) == (False, False, None)
    assert quote.claim_cap_profile == 12
    off = build_policy({"quantifier_guard_apply_caps": True, "quantifier_guard_enabled": False})
    assert run_preflight("List all songs", POINTER, off, "default").cap_enforced is False


def test_quote_mode_still_carries_the_classifier_telemetry() -> None:
    pre = run_preflight("Name the top 3 rivers", Mode.QUOTE, Policy(), "default")
    assert pre.quantifier.intensity == "SMALL_NUM_EXPLICIT"
    assert pre.quantifier.explicit_count == 3
    assert (pre.claim_cap, pre.claim_cap_profile) == (None, 3)


def test_reject_broad_is_opt_in() -> None:
    assert run_preflight(BROAD_UNBOUNDED, POINTER, Policy(), "default").rejected is False


@pytest.mark.parametrize(
    "question",
    [BROAD_UNBOUNDED, "List all songs ever written", "Give me a comprehensive history of Rome"],
)
def test_reject_broad_fires_on_unbounded_universals(question: str) -> None:
    pre = run_preflight(
        question, POINTER, build_policy({"quantifier_reject_broad": True}), "default"
    )
    assert pre.rejected is True
    message = pre.reject_message or ""
    for hint in ("year", "league", "country", "category", "--allow-broad"):
        assert hint in message
    assert "no bound" in message  # says why


@pytest.mark.parametrize(
    "question",
    [
        BOUNDED_UNIVERSAL,
        "Name all planets of the solar system",
        "What are the various uses of copper?",  # MANY is never rejected
        "What is the capital of France?",
    ],
)
def test_reject_broad_lets_bounded_and_non_universal_questions_through(question: str) -> None:
    policy = build_policy({"quantifier_reject_broad": True})
    assert run_preflight(question, POINTER, policy, "default").rejected is False


def test_reject_broad_needs_the_guard_for_this_mode() -> None:
    policy = build_policy({"quantifier_reject_broad": True})
    assert run_preflight(BROAD_UNBOUNDED, Mode.QUOTE, policy, "default").rejected is False
    off = build_policy({"quantifier_reject_broad": True, "quantifier_guard_enabled": False})
    assert run_preflight(BROAD_UNBOUNDED, POINTER, off, "default").rejected is False


def test_allow_broad_wins_over_reject_broad_and_marks_exploratory() -> None:
    policy = build_policy({"quantifier_reject_broad": True, "allow_broad": True})
    pre = run_preflight(BROAD_UNBOUNDED, POINTER, policy, "default")
    assert (pre.rejected, pre.exploratory) == (False, True)
    narrow = run_preflight("What is the capital of France?", POINTER, policy, "default")
    assert narrow.exploratory is False


def test_rejected_verification_is_ungrounded_broad_rejected() -> None:
    pre = run_preflight(
        BROAD_UNBOUNDED, POINTER, build_policy({"quantifier_reject_broad": True}), "default"
    )
    assert pre.rejected
    ver = rejected_verification()
    assert ver.verdict is Verdict.UNGROUNDED
    assert ver.label is Label.BROAD_REJECTED
    assert ver.violation_kinds == (ViolationKind.BROAD_QUANTIFIER_REJECTED,)
    assert ver.n_claims == 0
    assert "broad rejected" in ver.tails


def test_verify_answer_returns_the_rejection_for_a_rejected_preflight() -> None:
    policy = build_policy({"quantifier_reject_broad": True})
    pre = run_preflight(BROAD_UNBOUNDED, POINTER, policy, "default")
    ver = verify_answer(
        "anything [E1]",
        question=BROAD_UNBOUNDED,
        mode=POINTER,
        evidence=(),
        policy=policy,
        preflight=pre,
    )
    assert ver.label is Label.BROAD_REJECTED


# --------------------------------------------------------------------------- reminder


def _reminder(question: str, mode: Mode = POINTER, **overrides: object) -> str | None:
    policy = build_policy({"quantifier_reminder_enabled": True, **overrides})
    return render_quantifier_reminder(
        mode, policy, run_preflight(question, mode, policy, "hermes-3-8b")
    )


def test_reminder_is_off_by_default_and_needs_a_preflight() -> None:
    pre = run_preflight(BROAD_UNBOUNDED, POINTER, Policy(), "default")
    assert render_quantifier_reminder(POINTER, Policy(), pre) is None
    on = build_policy({"quantifier_reminder_enabled": True})
    assert render_quantifier_reminder(POINTER, on, None) is None


def test_reminder_only_in_guarded_modes_and_with_the_guard_on() -> None:
    assert _reminder(BROAD_UNBOUNDED, Mode.QUOTE) is None
    assert _reminder(BROAD_UNBOUNDED, POINTER, quantifier_guard_enabled=False) is None
    # quote mode answers in quotes: a claim count means nothing there, guarded or not
    assert _reminder(BROAD_UNBOUNDED, Mode.QUOTE, quantifier_guard_modes=["quote"]) is None


def test_bounded_and_unbounded_templates_state_the_cap_and_the_pointer_rule() -> None:
    bounded = _reminder(BOUNDED_UNIVERSAL) or ""
    unbounded = _reminder(BROAD_UNBOUNDED) or ""
    assert bounded.startswith(BOUNDED_TEMPLATE.split("{")[0][:40])
    assert unbounded.startswith(UNBOUNDED_TEMPLATE.split("{")[0][:40])
    assert bounded != unbounded
    assert "at most 8 claims" in bounded  # Hermes-3-8B ALL cap
    assert "at most 5 claims" in unbounded  # Hermes-3-8B OPEN_REQUEST cap
    assert "[E#]" in bounded and "[E#]" in unbounded


@pytest.mark.parametrize(
    "question",
    [
        "What is the capital of France?",
        "Which countries did not sign the treaty?",
        "What did half of the voters choose?",
        "Name the top 3 rivers of Europe",
        "Name some songs by Queen",
    ],
)
def test_a_question_that_is_not_broad_gets_no_reminder(question: str) -> None:
    assert _reminder(question) is None


@pytest.mark.parametrize(
    "question",
    [
        "Name many songs by Queen",  # MANY
        "List all songs by Queen",  # ALL
        "Give me a comprehensive history of Rome",  # COMPREHENSIVE
        "Describe the water cycle",  # OPEN_REQUEST
        "Name the top 30 rivers of Europe",  # explicit count above the cap of 12
    ],
)
def test_broad_questions_and_counts_above_the_cap_get_the_reminder(question: str) -> None:
    assert _reminder(question) is not None


def test_unbounded_template_says_the_list_comes_from_the_evidence() -> None:
    text = _reminder(BROAD_UNBOUNDED) or ""
    assert "must come from the evidence" in text
    assert "not from what you remember from training" in text


def test_json_mode_reminder_restates_the_warrant_rule() -> None:
    text = _reminder(BROAD_UNBOUNDED, Mode.CLAIM_LATTICE) or ""
    assert '"evidence"' in text and "warrant" in text and "[E#]" in text


def test_reminder_cap_is_bounded_by_the_global_claim_limit() -> None:
    text = _reminder("Name the top 30 rivers", claim_lattice_max_claims_per_answer=10) or ""
    assert "at most 10 claims" in text


def test_reminder_sits_right_after_the_grounding_reminder_in_the_prompt() -> None:
    policy = build_policy({"quantifier_reminder_enabled": True})
    pre = run_preflight(BROAD_UNBOUNDED, POINTER, policy, "default")
    ev = Evidence(
        id="E1",
        doc_id="d",
        chunk_id="d:0",
        title="Jazz",
        text="Jazz began in New Orleans.",
        score=1.0,
        offset_start=0,
        offset_end=26,
    )
    prompt = build_prompt(BROAD_UNBOUNDED, POINTER, [ev], policy, pre).text
    grounding = prompt.index(GROUNDING_REMINDERS[POINTER])
    reminder = prompt.index("Quantifier reminder:")
    evidence = prompt.index('<evidence id="E1"')
    assert grounding < reminder < evidence
    between = prompt[grounding + len(GROUNDING_REMINDERS[POINTER]) : reminder]
    assert between == "<|im_end|>\n<|im_start|>user\n"


# --------------------------------------------------------------------------- caps per rung

CAPS_ON = {"quantifier_guard_apply_caps": True}


@pytest.mark.parametrize(("profile", "cap"), [("hermes-3-8b", 1), ("default", 3)])
def test_proportional_keeps_its_profile_cap_when_caps_are_applied(profile: str, cap: int) -> None:
    pre = run_preflight("What did most of the settlers grow?", POINTER, build_policy(CAPS_ON), profile)
    assert pre.quantifier.intensity == "PROPORTIONAL"
    assert (pre.claim_cap, pre.claim_cap_profile, pre.cap_enforced) == (cap, cap, True)


@pytest.mark.parametrize(
    "question", ["What is the capital of France?", "Which countries have no coastline?"]
)
def test_absent_and_singular_keep_the_policy_default_cap(question: str) -> None:
    pre = run_preflight(question, POINTER, build_policy(CAPS_ON), "hermes-3-8b")
    assert (pre.claim_cap, pre.claim_cap_profile) == (12, 1)


def test_a_universal_over_a_stated_number_is_capped_at_that_number() -> None:
    policy = build_policy(CAPS_ON)
    pre = run_preflight("Name all three primary colours", POINTER, policy, "default")
    assert (pre.quantifier.intensity, pre.claim_cap, pre.quantifier.scope_bound_hint) == (
        "ALL",
        3,
        "bounded",
    )
    # the operator's override for the rung still wins
    listed = build_policy({**CAPS_ON, "quantifier_caps_by_intensity": {"ALL": 2}})
    assert run_preflight("Name all three primary colours", POINTER, listed, "default").claim_cap == 2
    # reject-broad never refuses it: the number bounds the set
    reject = build_policy({"quantifier_reject_broad": True})
    assert run_preflight("List all 50 US states", POINTER, reject, "default").rejected is False


def test_an_adverbial_first_is_not_capped_at_one() -> None:
    pre = run_preflight(
        "Who first reached the summit of Everest?", POINTER, build_policy(CAPS_ON), "hermes-3-8b"
    )
    assert (pre.quantifier.intensity, pre.claim_cap) == ("SINGULAR", 12)


def test_the_plans_preflight_hash_binds_classifications_caps_and_titles(monkeypatch) -> None:
    """The preflight node of a run's plan
    (docs/grounding.md, 'Preflight, reject-broad, allow-broad', decision 8)."""
    from qfarm.common import profiles
    from qfarm.common.grounding.names import TitleSet
    from qfarm.common.grounding.preflight import plan_preflight_hash

    questions = ["what causes multiple sclerosis?", "List all members of the Beatles."]
    base = plan_preflight_hash(questions, "hermes-3-8b")
    assert base == plan_preflight_hash([*questions, questions[0]], "hermes-3-8b")
    # the corpus's titles read "multiple sclerosis" as a name: another classification
    assert plan_preflight_hash(questions, "hermes-3-8b", TitleSet(["Multiple sclerosis"])) != base
    # a title list that reads no question differently still names another corpus
    assert plan_preflight_hash(questions, "hermes-3-8b", TitleSet(["Some Title"])) != base
    assert plan_preflight_hash(questions, "small-local") != base  # another profile's caps
    # a changed cap table changes it with no version string moved
    table = {k: dict(v) for k, v in profiles.MODEL_PROFILES.items()}
    table["hermes-3-8b"]["ALL"] = 6
    monkeypatch.setattr(profiles, "MODEL_PROFILES", table)
    assert plan_preflight_hash(questions, "hermes-3-8b") != base
