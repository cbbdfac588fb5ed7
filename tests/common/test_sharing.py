"""Shared samples: which requests of a bundle share one call, and the seeds that make a
sample's answer independent of its group (qfarm.common.sharing, qfarm.common.jobs)."""

from __future__ import annotations

import pytest

from qfarm.common import policy as policy_module
from qfarm.common.jobs import (
    bundles,
    expand_jobs,
    job_from_ref,
    ref_for,
    seed_for,
    shared_seed_base,
)
from qfarm.common.models import Manifest, Mode, Question, Sampling
from qfarm.common.policy import Policy, governance_policy_hash, verifier_policy_hash
from qfarm.common.sharing import share_groups

SHARE = Sampling(seed=0, share_samples=True)


def _items(seeds: list[int], prompt: str = "p", **sampling: object) -> list[tuple[str, Sampling, str]]:
    return [(prompt, SHARE.model_copy(update={"seed": s, **sampling}), f"j{s}") for s in seeds]


def test_consecutive_seeds_of_one_prompt_are_one_group_in_seed_order() -> None:
    items = _items([12, 10, 13, 11])
    assert share_groups(items) == [[1, 3, 0, 2]]  # seeds 10, 11, 12, 13: choice j = seed 10 + j


def test_a_gap_in_the_seeds_starts_a_new_request() -> None:
    """Sample 1 already has its row (a redelivered bundle): 0 alone, 2-3 together, each
    request seeded by its first sample, so every sample keeps its seed."""
    assert share_groups(_items([10, 12, 13])) == [[0], [1, 2]]


def test_other_prompts_or_sampling_never_share() -> None:
    items = _items([10, 11]) + _items([12], prompt="q") + _items([13], max_tokens=7)
    assert share_groups(items) == [[0, 1], [2], [3]]


def test_off_greedy_or_capped_groups() -> None:
    off = [("p", Sampling(seed=s), "j") for s in (10, 11)]
    assert share_groups(off) == [[0], [1]]
    assert share_groups(_items([10, 11], temperature=0.0)) == [[0], [1]]  # vLLM: no greedy n>1
    assert share_groups(_items([1, 2, 3, 4, 5]), max_n=2) == [[0, 1], [2, 3], [4]]


def test_shared_seeds_are_the_base_plus_the_sample_index() -> None:
    base = shared_seed_base("q1", Mode.QUOTE)
    assert [seed_for("q1", Mode.QUOTE, i, shared=True) for i in range(3)] == [base, base + 1, base + 2]
    assert 0 <= base < 1 << 30
    assert seed_for("q1", Mode.QUOTE, 1) != base + 1  # off: each sample its own hash


def test_jobs_carry_shared_seeds_through_the_queue_message() -> None:
    policy = Policy(share_samples=True)
    jobs = list(expand_jobs("r", [Question(id="q1", text="What is jazz?")], [Mode.QUOTE], 3,
                            policy, model="m"))
    assert [j.seed for j in jobs] == [shared_seed_base("q1", Mode.QUOTE) + i for i in range(3)]
    manifest = Manifest.model_construct(policy=policy, model="m", model_profile_id="default",
                                        keep_answers=False, use_cache=True)
    assert [job_from_ref(ref_for(j), manifest).seed for j in jobs] == [j.seed for j in jobs]


def test_the_switch_folds_into_the_governance_hash_only_while_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off, the hashed payload is the one runs had before the switch existed (they keep
    resuming, comparing and hitting the cache as before); on, it changes the governance
    hash, never the verifier's (the prompt and the checks are the same)."""
    payloads: list[dict] = []
    monkeypatch.setattr(policy_module, "_digest", lambda p: payloads.append(p) or "h")
    policy_module._governance_policy_hash(Policy())
    policy_module._governance_policy_hash(Policy(share_samples=True))
    assert "share_samples" not in payloads[0] and payloads[1]["share_samples"] is True
    monkeypatch.undo()
    off, on = Policy(), Policy(share_samples=True)
    assert governance_policy_hash(on) != governance_policy_hash(off)
    assert verifier_policy_hash(on) == verifier_policy_hash(off)


def _plan(n: int, share: bool, questions: int = 3) -> list:
    qs = [Question(id=f"q{i}", text=f"What is thing {i}?") for i in range(questions)]
    return list(expand_jobs("r", qs, [Mode.QUOTE, Mode.CLAIM_LATTICE], n,
                            Policy(share_samples=share), model="m"))


def test_bundles_under_sharing_end_before_a_group_they_would_cut() -> None:
    sizes = [len(b) for b in bundles(_plan(4, share=True), 10)]
    assert sizes == [8, 8, 8]  # each (question, mode)'s 4 samples stay in one bundle
    assert [len(b) for b in bundles(_plan(4, share=False), 10)] == [10, 10, 4]  # off: as ever
    # A group larger than a bundle is cut where it must be, and nowhere else.
    assert [len(b) for b in bundles(_plan(13, share=True, questions=1), 10)] == [10, 3, 10, 3]
    assert [len(b) for b in bundles(_plan(13, share=True), 32)] == [26, 26, 26]
    for size in (1, 3, 7, 32):  # every job once, in plan order
        plan = _plan(5, share=True)
        assert [j for b in bundles(plan, size) for j in b] == plan
