"""Endpoint choice, breaker, Retry-After and health, on a fake clock (no I/O)."""

from __future__ import annotations

import threading

import pytest

from qfarm.common.errors import (
    BackPressureError,
    LLMConnectError,
    TransientServiceError,
    TransientStatusError,
)
from qfarm.common.vocab import BreakerState
from qfarm.worker.llm.balancer import Balancer, home_key
from qfarm.worker.llm.client import Target


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(n: int = 2, clock: Clock | None = None, **kw) -> Balancer:
    opts = {"max_inflight": 8, "breaker_failures": 3, "breaker_cooldown_s": 10.0, **kw}
    return Balancer([Target(f"http://e{i}") for i in range(n)], clock=clock or Clock(), **opts)


def failure(
    status: int = 503,
    retry_after: float | None = None,
    kind: type[TransientStatusError] = TransientStatusError,
) -> TransientServiceError:
    return kind("boom", status=status, retry_after_s=retry_after)


def refused() -> TransientServiceError:
    return LLMConnectError("boom")


def test_least_outstanding_spreads_requests() -> None:
    b = make(3)
    held = [b.acquire() for _ in range(6)]
    assert sorted(e.url for e in held) == ["http://e0"] * 2 + ["http://e1"] * 2 + ["http://e2"] * 2
    b.release(held[0], ok=True)
    assert b.acquire().url == held[0].url


def test_failover_avoids_tried_endpoints_but_falls_back() -> None:
    b = make(2)
    assert b.acquire(avoid=["http://e0"]).url == "http://e1"
    solo = make(1)
    assert solo.acquire(avoid=["http://e0"]).url == "http://e0"


def test_breaker_opens_after_consecutive_failures_and_closes_after_a_trial() -> None:
    clock = Clock()
    b = make(2, clock)
    e0 = b.endpoints[0]
    for _ in range(3):
        b.release(b.acquire(avoid=["http://e1"]), ok=False, error=failure())
    assert e0.breaker == BreakerState.OPEN
    assert all(b.acquire().url == "http://e1" for _ in range(4))  # e0 out of rotation
    clock.now += 10.5
    trial = b.acquire(avoid=["http://e1"])
    assert trial is e0 and e0.breaker == BreakerState.HALF_OPEN
    assert b.acquire(avoid=["http://e1"]).url == "http://e1"  # only one trial at a time
    b.release(trial, ok=False, error=failure())
    assert e0.breaker == BreakerState.OPEN  # failed trial: another cool-down
    clock.now += 10.5
    b.release(b.acquire(avoid=["http://e1"]), ok=True)
    assert e0.breaker == BreakerState.CLOSED and e0.times_opened == 2


def test_a_success_resets_the_failure_count() -> None:
    b = make(1)
    for ok in (False, False, True, False, False):
        b.release(b.acquire(), ok=ok, error=None if ok else failure())
    assert b.endpoints[0].breaker == BreakerState.CLOSED


def test_429_sets_retry_after_and_does_not_trip_the_breaker() -> None:
    clock = Clock()
    b = make(2, clock)
    e0 = b.endpoints[0]
    for _ in range(5):
        picked = b.acquire(avoid=["http://e1"])
        assert picked is e0
        b.release(picked, ok=False, error=failure(429, retry_after=4.0, kind=BackPressureError))
        others = [b.acquire() for _ in range(2)]
        assert {e.url for e in others} == {"http://e1"}  # e0 held back
        for e in others:
            b.release(e, ok=True)
        clock.now += 4.1
    assert e0.breaker == BreakerState.CLOSED and e0.failed == 5


def test_nothing_usable_waits_then_names_every_reason() -> None:
    b = make(2, wait_clock := Clock())
    b.mark_health("http://e0", False)
    b.release(b.acquire(), ok=False, error=failure(429, retry_after=30, kind=BackPressureError))
    with pytest.raises(TransientServiceError) as info:
        b.acquire(wait_s=0.0, job_id="j9")
    msg = str(info.value)
    assert (
        "http://e0: unhealthy" in msg
        and "http://e1: Retry-After" in msg
        and info.value.job_id == "j9"
    )
    assert wait_clock.now == 100.0


def test_waiting_acquire_wakes_when_health_returns() -> None:
    b = make(1, clock=None)
    b.mark_health("http://e0", False, "down")
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(b.acquire(wait_s=5.0).url))
    t.start()
    b.mark_health("http://e0", True)
    t.join(timeout=5)
    assert got == ["http://e0"]


def test_max_inflight_bounds_each_endpoint() -> None:
    b = make(1, max_inflight=2)
    b.acquire(), b.acquire()
    with pytest.raises(TransientServiceError, match="2 requests in flight"):
        b.acquire(wait_s=0.0)


def test_connect_errors_take_an_endpoint_out_only_with_health_polling() -> None:
    b = make(2)
    b.release(b.acquire(avoid=["http://e1"]), ok=False, error=refused())
    assert b.endpoints[0].healthy
    b.enable_passive_health()
    b.release(b.acquire(avoid=["http://e1"]), ok=False, error=refused())
    assert not b.endpoints[0].healthy


def test_scraped_capacity_weights_the_choice() -> None:
    for weighting, expected in ((True, 8), (False, 6)):
        b = make(2, max_inflight=64, metrics_weighting=weighting)
        held = [b.acquire() for _ in range(16)]  # 8 each
        b.update_load("http://e0", running=8, waiting=0)  # not saturated: capacity >= 8
        b.update_load("http://e1", running=4, waiting=4)  # saturated: capacity 4
        for e in held:
            b.release(e, ok=True)
        picks = [b.acquire().url for _ in range(12)]
        assert picks.count("http://e0") == expected, weighting


def test_other_processes_load_counts() -> None:
    b = make(2)
    b.update_load("http://e0", running=6, waiting=0)  # someone else keeps e0 busy
    assert [b.acquire().url for _ in range(6)].count("http://e1") == 6


def test_snapshot_never_shows_keys() -> None:
    b = Balancer(
        [Target("http://e0", "sk-secret-123")],
        max_inflight=1,
        breaker_failures=1,
        breaker_cooldown_s=1,
    )
    assert "sk-secret-123" not in repr(b.snapshot())


class CountingClock(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now


def test_a_full_endpoint_makes_the_gateway_wait_for_a_slot_not_fail() -> None:
    clock = CountingClock()
    b = make(1, clock, max_inflight=2)
    held = [b.acquire(), b.acquire()]
    got: list[str] = []
    t = threading.Thread(
        target=lambda: got.append(b.acquire(wait_s=0.0, wait_for_slot=True).url), daemon=True
    )
    calls_before = clock.calls
    t.start()
    t.join(timeout=0.3)
    assert t.is_alive() and got == []  # past wait_s, still waiting: the endpoint is only full
    assert clock.calls - calls_before < 20  # it sleeps until notified, it does not spin
    b.release(held[0], ok=True)
    t.join(timeout=5)
    assert got == ["http://e0"]


def test_waiting_for_a_slot_still_gives_up_when_no_endpoint_is_merely_full() -> None:
    b = make(1, max_inflight=2)
    b.mark_health("http://e0", False, "down")
    with pytest.raises(TransientServiceError, match="unhealthy"):
        b.acquire(wait_s=0.0, wait_for_slot=True)


def test_identical_prompts_go_home_while_its_load_is_within_the_slack() -> None:
    b = make(3, affinity_slack=2)
    key = home_key("the same prompt, sampled again")
    first = [b.acquire(home=key) for _ in range(3)]
    assert len({e.url for e in first}) == 1  # home three times: 0, 1, 2 ahead of the others
    home = first[0].url
    fourth = b.acquire(home=key)  # home would be 3 ahead: the least loaded wins
    assert fourth.url != home
    # The same key ranks the same endpoint first in every process (a new balancer).
    assert make(3, affinity_slack=2).acquire(home=key).url == home


def test_homes_spread_over_endpoints_and_off_means_least_loaded() -> None:
    b = make(4, affinity_slack=1)
    homes = set()
    for i in range(40):
        e = b.acquire(home=home_key(f"prompt {i}"))
        homes.add(e.url)
        b.release(e, ok=True)
    assert len(homes) == 4  # different prompts, different homes
    off = make(3)  # no slack: the key changes nothing
    key = home_key("p")
    assert sorted(off.acquire(home=key).url for _ in range(3)) == [
        "http://e0", "http://e1", "http://e2",
    ]


def test_a_home_that_is_not_usable_sends_its_prompts_elsewhere() -> None:
    b = make(2, affinity_slack=8)
    key = home_key("q")
    home = b.acquire(home=key)
    b.release(home, ok=True)
    b.mark_health(home.url, False, "down")
    assert b.acquire(home=key).url != home.url
    assert b.acquire(home=key, avoid=[]).url != home.url


def test_a_questions_modes_share_a_home_when_their_prompts_open_with_the_evidence() -> None:
    """The home key is the prompt's opening through its evidence: with the evidence first
    a question's modes share it (one prefix cache prefills the evidence once); in the
    default order each mode's prompt is its own, and other questions go elsewhere."""
    from qfarm.common.grounding.prompts import build_prompt
    from qfarm.common.models import Evidence, Mode
    from qfarm.common.policy import Policy, build_policy

    def evidence(topic: str) -> list[Evidence]:
        return [Evidence(id=f"E{i}", doc_id=f"{topic}{i}", chunk_id="0", title=topic,
                         text=f"{topic} fact number {i}.", score=1.0, offset_start=0,
                         offset_end=20) for i in (1, 2)]  # fmt: skip

    first = build_policy({"prompt_order": "evidence_first"})

    def keys(policy: Policy, topic: str) -> set[str]:
        return {home_key(build_prompt(f"What is {topic}?", m, evidence(topic), policy).text)
                for m in Mode}  # fmt: skip

    assert len(keys(first, "jazz")) == 1
    assert len(keys(Policy(), "jazz")) == len(Mode)
    assert keys(first, "jazz") != keys(first, "opera")
