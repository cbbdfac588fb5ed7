"""The bounded-universal fixture set: questions reject-broad must never refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from qfarm.common.errors import InputError
from qfarm.common.jobs import expand_jobs, job_from_ref, ref_for
from qfarm.common.models import Manifest, Mode
from qfarm.common.policy import Policy, governance_policy_hash, verifier_policy_hash
from qfarm.common.questions import parse_questions

PATH = Path(__file__).resolve().parents[2] / "bench/questions/bounded_universal.jsonl"


def questions():
    return parse_questions(str(PATH), PATH.read_text())


def test_the_set_has_at_least_ten_bounded_questions_including_the_design_examples() -> None:
    qs = questions()
    assert len(qs) >= 10
    assert {q.scope for q in qs} == {"bounded"}
    texts = " | ".join(q.text.casefold() for q in qs)
    for phrase in (
        "all members of the beatles",
        "all planets in the solar system",
        "all the us states beginning with m",
    ):
        assert phrase in texts


def test_scope_is_validated_where_the_file_says_it() -> None:
    with pytest.raises(InputError, match=r"f.jsonl:1: \"scope\" must be"):
        parse_questions("f.jsonl", '{"id": "x", "question": "List all rivers", "scope": "small"}\n')


def test_scope_survives_the_queue_message() -> None:
    q = questions()[0]
    policy = Policy()
    job = next(iter(expand_jobs("r1", [q], [Mode.CLAIM_LATTICE_POINTER], 1, policy, model="m")))
    manifest = Manifest(
        run_id="r1", created_at=0.0, question_file="f", question_file_digest="d", n_questions=1,
        modes=(Mode.CLAIM_LATTICE_POINTER,), n=1, n_jobs=1, policy=policy,
        verifier_policy_hash=verifier_policy_hash(policy),
        governance_policy_hash=governance_policy_hash(policy), model="m", model_profile_id="default",
    )  # fmt: skip
    assert job_from_ref(ref_for(job), manifest).question.scope == "bounded"
