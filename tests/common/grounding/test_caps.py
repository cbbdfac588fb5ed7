"""The quantifier cap rules: what rows report as the guard's cap, the profile table's cap,
and how the profile table folds into the governance hash."""

from __future__ import annotations

from types import MappingProxyType

import pytest

import qfarm.common.profiles as profiles
from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.rows import build_row
from qfarm.common.jobs import expand_jobs
from qfarm.common.models import JobRecord, Mode, Question
from qfarm.common.policy import Policy, build_policy, governance_policy_hash, verifier_policy_hash

POINTER = Mode.CLAIM_LATTICE_POINTER
HERMES = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"


def row_for(question: str, mode: Mode, policy: Policy, model: str = HERMES):
    job = next(
        iter(expand_jobs("r1", [Question(id="q1", text=question)], [mode], 1, policy, model=model))
    )
    pre = run_preflight(question, mode, policy, job.model_profile_id)
    return build_row(JobRecord(job=job, preflight=pre))


@pytest.mark.parametrize(
    ("question", "mode", "overrides"),
    [
        ("List all songs by Queen", POINTER, {"quantifier_guard_enabled": False}),  # table: 8
        ("What is the capital of France?", POINTER, {"quantifier_guard_enabled": False}),  # 1
        ("Name some rivers of Spain", Mode.QUOTE, {}),  # quote is not guarded by default: 5
    ],
)
def test_claim_cap_applied_is_null_when_the_guard_is_off_for_the_job(
    question: str, mode: Mode, overrides: dict
) -> None:
    row = row_for(question, mode, build_policy(overrides))
    assert row.claim_cap_applied is None
    assert row.claim_cap_profile is not None  # the table's value is still reported


def test_rows_report_the_table_cap_apart_from_the_enforced_one() -> None:
    row = row_for(
        "What is the capital of France?",
        POINTER,
        build_policy({"quantifier_guard_apply_caps": True}),
    )
    assert (row.claim_cap_profile, row.claim_cap_applied, row.claim_cap_enforced) == (1, 12, True)
    broad = row_for(
        "List all songs by Queen", POINTER, build_policy({"quantifier_guard_apply_caps": True})
    )
    assert (broad.claim_cap_profile, broad.claim_cap_applied) == (8, 8)
    allowed = row_for("List all songs by Queen", POINTER, build_policy({"allow_broad": True}))
    assert (allowed.claim_cap_profile, allowed.claim_cap_applied) == (8, 12)


def test_rows_carry_the_served_model_verbatim_and_its_profile() -> None:
    row = row_for("What is the capital of France?", POINTER, Policy(), model=HERMES)
    assert (row.model, row.model_profile_id, row.model_profile_key) == (HERMES, HERMES, "hermes-3-8b")
    other = row_for("What is the capital of France?", POINTER, Policy(), model="Qwen/Qwen2.5-7B")
    assert (other.model_profile_id, other.model_profile_key) == ("Qwen/Qwen2.5-7B", "default")


def test_editing_one_profile_cap_changes_the_governance_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = Policy()
    before = governance_policy_hash(policy), verifier_policy_hash(policy)
    edited = {pid: dict(caps) for pid, caps in profiles.MODEL_PROFILES.items()}
    edited["hermes-3-8b"]["ALL"] = 7
    monkeypatch.setattr(
        profiles,
        "MODEL_PROFILES",
        MappingProxyType({k: MappingProxyType(v) for k, v in edited.items()}),
    )
    assert governance_policy_hash(policy) != before[0]
    assert verifier_policy_hash(policy) == before[1]


def test_the_profile_table_version_folds_into_the_governance_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import qfarm.common.versions as versions

    before = governance_policy_hash(Policy())
    monkeypatch.setattr(versions, "MODEL_PROFILES_VERSION", "profiles-test")
    assert governance_policy_hash(Policy()) != before
