"""The gateway against simulators that fail the way vLLM 0.33 fails, over real HTTP."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Sampling
from qfarm.ops.sim import behaviour
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.worker.llm import open_gateway
from qfarm.worker.llm.pool import endpoint_report

sys.path.insert(0, str(Path(__file__).parent))
from test_llm_gateway import generation_requests, settings_for  # noqa: E402

pytestmark = pytest.mark.slow
FAST = {"latency": "zero", "profile": "clean"}
MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[SimulatorHandle, SimulatorHandle]]:
    with (
        start_simulator(**FAST, max_model_len=2048) as a,
        start_simulator(**FAST, disable_log_stats=True) as b,
    ):
        yield a, b


@pytest.fixture
def sims(pair: tuple[SimulatorHandle, SimulatorHandle]) -> tuple[SimulatorHandle, ...]:
    for sim in pair:
        sim.reset()
    return pair


@pytest.fixture
def gateways() -> Iterator:
    with ExitStack() as opened:
        yield lambda *sims, **kw: opened.enter_context(open_gateway(settings_for(*sims, **kw)))


def test_vllms_queue_full_sends_the_job_elsewhere_without_opening_the_breaker(sims, gateways):
    a, b = sims
    gw = gateways(a, b, llm_breaker_failures=2)
    a.set_faults(rates={"queue_full": 1.0})
    results = [gw.generate(f"p{i}", Sampling(max_tokens=5), job_id=f"j{i}") for i in range(8)]
    assert {g.endpoint for g in results} == {b.url}
    state = gw.endpoint_states()[0]
    assert state["failed"] >= 1 and state["breaker"] == "closed" and state["times_opened"] == 0


@pytest.mark.parametrize("fault", ["stream_error", "abort"])
def test_stream_error_events_and_aborts_are_retried_not_answers(sims, gateways, fault):
    a, _ = sims
    gw = gateways(a, llm_stream=True)
    a.set_faults(next=[fault])
    gen = gw.generate("hello there", Sampling(max_tokens=20), job_id="j")
    assert gen.attempts == 2 and gen.finish_reason in ("stop", "length")
    assert [r["fault"] for r in generation_requests(a)] == [fault, None]


def test_a_silent_shrink_by_the_simulator_is_recorded_in_the_generation(sims, gateways):
    a, _ = sims  # max_model_len 2048
    gw = gateways(a)
    assert gw.endpoint_states()[0]["max_model_len"] == 2048
    # 1,900 tokens: the (high) estimate sees no room and sends max_tokens unchanged; the
    # server fits 300 into the 148 tokens left, silently, and the gateway notices.
    prompt = "word " * 1900
    gen = gw.generate(prompt, Sampling(max_tokens=300, temperature=0.0), job_id="j")
    assert gen.max_tokens_effective is not None and gen.max_tokens_effective < 300
    assert gen.max_tokens_effective <= 2048 - behaviour.count_tokens(prompt)


def test_missing_metrics_are_reported_by_the_poller_and_by_qfarm_status(sims, gateways, caplog):
    a, b = sims
    with caplog.at_level(logging.WARNING, logger="qfarm.llm"):
        gw = gateways(a, b, llm_health_interval_s=0.1)
        for _ in range(50):
            if gw.endpoint_states()[1]["weighting"] != "on":
                break
            time.sleep(0.1)
    weighting = [s["weighting"] for s in gw.endpoint_states()]
    assert weighting[0] == "on" and weighting[1].startswith("off: ")
    assert sum("load weighting is off" in r.getMessage() for r in caplog.records) == 1

    lines = endpoint_report(settings_for(a, b))
    assert "max_model_len=2048" in lines[0] and "load weighting on" in lines[0]
    assert "load weighting off: " in lines[1] and "--disable-log-stats" in lines[1]

    env = {**os.environ, "QFARM_LLM_ENDPOINTS": f"{a.url},{b.url}",
           "QFARM_REDIS_URL": f"redis://127.0.0.1:{os.environ.get('QFARM_TEST_REDIS_PORT', '6379')}/0"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "qfarm.cli", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"endpoint {b.url}: healthy" in out.stdout, out.stderr
    assert "load weighting off: /metrics has no vllm:" in out.stdout


def test_an_unfinished_answer_on_every_attempt_is_a_failed_job(sims, gateways):
    a, _ = sims
    gw = gateways(a, llm_max_attempts=2)
    a.set_faults(next=["abort", "abort"])
    with pytest.raises(TransientServiceError, match="abort"):
        gw.generate("hello", Sampling(max_tokens=20), job_id="j")


@pytest.mark.parametrize(
    "overrides",
    [
        {"llm_health_interval_s": 0.2},  # a passing /health brings it back
        {"llm_retry_after_max_s": 0.5},  # no poller: the cap does
    ],
)
def test_an_absurd_retry_after_does_not_park_a_healthy_endpoint(sims, gateways, overrides):
    a, _ = sims
    gw = gateways(a, llm_wait_for_endpoint_s=5.0, **overrides)
    a.set_faults(retry_after_s=1_000_000_000, next=["429"])
    first = gw.generate("one", Sampling(max_tokens=5), job_id="j1")
    t0 = time.monotonic()
    later = gw.generate("two", Sampling(max_tokens=5), job_id="j2")
    assert first.attempts == 2 and later.attempts == 1
    assert time.monotonic() - t0 < 3.0
    assert [r["status"] for r in generation_requests(a)] == [429, 200, 200]
