"""The gateway over real HTTP against simulator subprocesses: admission, retries, failover, health."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from qfarm.common.errors import ConfigError, PermanentServiceError, TransientServiceError
from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Evidence, Generation, Mode, Sampling
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.worker.llm import Gateway, open_gateway

pytestmark = pytest.mark.slow
FAST = {"latency": "zero", "profile": "clean"}


def settings_for(*sims: SimulatorHandle, **overrides: object) -> Settings:
    opts: dict[str, object] = {
        "llm_endpoints": ",".join(s.url for s in sims),
        "llm_health_interval_s": 0.0,
        "llm_backoff_base_s": 0.02,
        "llm_backoff_max_s": 0.1,
        "llm_timeout_s": 10.0,
        "llm_wait_for_endpoint_s": 10.0,
        **overrides,
    }
    return Settings(**opts)  # type: ignore[arg-type]


@pytest.fixture
def gateway_factory() -> Iterator:
    opened: list[Gateway] = []

    def make(*sims: SimulatorHandle, **overrides: object) -> Gateway:
        gw = open_gateway(settings_for(*sims, **overrides))
        opened.append(gw)
        return gw

    yield make
    for gw in opened:
        gw.close()


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[SimulatorHandle, SimulatorHandle]]:
    with start_simulator(**FAST) as a, start_simulator(**FAST) as b:
        yield a, b


@pytest.fixture
def fresh_pair(
    pair: tuple[SimulatorHandle, SimulatorHandle],
) -> tuple[SimulatorHandle, SimulatorHandle]:
    for sim in pair:
        sim.reset()
    return pair


def generation_requests(sim: SimulatorHandle) -> list[dict]:
    """The simulator's request log without the gateway's start-up /v1/models probe."""
    return [r for r in sim.stats()["requests"] if "completions" in r["path"]]


def run_many(
    gw: Gateway, n: int, threads: int, sampling: Sampling | None = None
) -> list[Generation]:
    sampling = sampling or Sampling(max_tokens=20)
    with ThreadPoolExecutor(threads) as ex:
        return list(
            ex.map(lambda i: gw.generate(f"prompt {i}", sampling, job_id=f"j{i}"), range(n))
        )


# --------------------------------------------------------------------------- balancing and health


def test_load_follows_capacity(gateway_factory) -> None:
    with (
        start_simulator(max_num_seqs=6, ttft_ms=100, tpot_ms=0) as big,
        start_simulator(max_num_seqs=2, ttft_ms=100, tpot_ms=0) as small,
    ):
        gw = gateway_factory(big, small, llm_health_interval_s=0.3)
        results = run_many(gw, 160, threads=24)
    share = Counter(g.endpoint for g in results)[big.url] / len(results)
    assert 0.6 <= share <= 0.9  # capacity share is 6/8 = 0.75
    assert all(g.simulated and g.attempts == 1 for g in results)


def test_prefix_affinity_sends_a_prompts_samples_to_one_endpoint(fresh_pair, gateway_factory) -> None:
    prompts = [f"question {q}: the same evidence for every sample" for q in range(16)]
    work = [(p, s) for p in prompts for s in range(4)]
    gw = gateway_factory(*fresh_pair, llm_prefix_affinity=8)
    with ThreadPoolExecutor(8) as ex:
        done = list(ex.map(
            lambda w: (w[0], gw.generate(w[0], Sampling(max_tokens=8, temperature=0.7,
                                                        seed=w[1]), job_id=f"{w[0]}/{w[1]}")),
            work,
        ))  # fmt: skip
    homes = {prompt: {g.endpoint for p, g in done if p == prompt} for prompt in prompts}
    assert all(len(used) == 1 for used in homes.values()), homes
    assert len(set().union(*homes.values())) == 2  # different prompts, both endpoints


def test_killed_endpoint_is_taken_out_and_every_job_completes(gateway_factory) -> None:
    with (
        start_simulator(ttft_ms=40, tpot_ms=0) as doomed,
        start_simulator(ttft_ms=40, tpot_ms=0) as survivor,
    ):
        gw = gateway_factory(doomed, survivor, llm_health_interval_s=0.2)
        done = Counter()
        lock = threading.Lock()

        def one(i: int) -> Generation:
            g = gw.generate(f"prompt {i}", Sampling(max_tokens=10), job_id=f"j{i}")
            with lock:
                done["n"] += 1
                if done["n"] == 30:
                    doomed.kill()
            return g

        with ThreadPoolExecutor(12) as ex:
            results = list(ex.map(one, range(150)))
        state = {s["endpoint"]: s for s in gw.endpoint_states()}
    assert len(results) == 150 and all(g.text for g in results)
    assert not state[doomed.url]["healthy"] or state[doomed.url]["breaker"] != "closed"
    late = results[60:]
    assert Counter(g.endpoint for g in late)[survivor.url] == len(late)
    assert any(g.attempts > 1 for g in results)  # the in-flight ones failed over


def test_health_polling_takes_out_and_brings_back(fresh_pair, gateway_factory) -> None:
    a, b = fresh_pair
    gw = gateway_factory(a, b, llm_health_interval_s=0.1)
    a.set_faults(down=True)
    deadline = time.monotonic() + 5
    while gw.endpoint_states()[0]["healthy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not gw.endpoint_states()[0]["healthy"]
    results = run_many(gw, 20, threads=4)
    assert {g.endpoint for g in results} == {b.url}
    a.set_faults(down=False)
    while not gw.endpoint_states()[0]["healthy"] and time.monotonic() < deadline + 5:
        time.sleep(0.05)
    assert a.url in {g.endpoint for g in run_many(gw, 20, threads=4)}


# --------------------------------------------------------------------------- retries


def test_retry_after_is_honoured(gateway_factory) -> None:
    with start_simulator(**FAST, retry_after_s=1) as sim:
        gw = gateway_factory(sim)
        sim.set_faults(next=["429"])
        results = run_many(gw, 24, threads=4)
        log = generation_requests(sim)
    assert len(results) == 24 and sorted(g.attempts for g in results)[-1] == 2
    (limited,) = [r for r in log if r["status"] == 429]
    t = limited["t_done"]
    # Requests already on the wire when the 429 left may land within a few ms; after
    # that nothing may arrive before the Retry-After time.
    early = [r for r in log if t + 0.05 < r["t_arrival"] < t + 1.0]
    assert early == []
    assert any(r["t_arrival"] >= t + 1.0 for r in log)


@pytest.mark.parametrize(
    ("kind", "match"), [("malformed", "not valid JSON"), ("empty", "no choices")]
)
def test_bad_bodies_give_a_clear_error_never_a_crash(
    kind: str, match: str, gateway_factory
) -> None:
    with start_simulator(**FAST) as sim:
        gw = gateway_factory(sim, llm_max_attempts=3, llm_breaker_failures=100)
        sim.set_faults(next=[kind])
        ok = gw.generate("p", Sampling(max_tokens=10), job_id="recovers")
        assert ok.attempts == 2 and ok.text
        sim.set_faults(rates={kind: 1.0})
        with pytest.raises(TransientServiceError, match=match) as info:
            gw.generate("p", Sampling(max_tokens=10), job_id="job-42")
    err = info.value
    assert err.attempts == 3 and err.job_id == "job-42" and err.endpoint == sim.url
    assert "gave up after 3 attempts" in str(err)


def test_breaker_opens_and_closes(fresh_pair, gateway_factory) -> None:
    a, b = fresh_pair
    gw = gateway_factory(a, b, llm_breaker_failures=3, llm_breaker_cooldown_s=1.0)
    a.set_faults(rates={"503": 1.0})
    first = [gw.generate(f"p{i}", Sampling(max_tokens=5), job_id=f"j{i}") for i in range(20)]
    assert {g.endpoint for g in first} == {b.url}
    state = gw.endpoint_states()[0]
    assert state["breaker"] == "open" and state["times_opened"] >= 1
    hits_while_open = len(generation_requests(a))
    assert hits_while_open <= 5  # 3 to open it, at most a trial or two: not 20
    a.set_faults(rates={})
    time.sleep(1.1)
    later = [gw.generate(f"q{i}", Sampling(max_tokens=5), job_id=f"k{i}") for i in range(10)]
    assert gw.endpoint_states()[0]["breaker"] == "closed"
    assert a.url in {g.endpoint for g in later}


def test_permanent_errors_fail_at_once(gateway_factory) -> None:
    with start_simulator(**FAST, max_model_len=512) as sim:
        gw = gateway_factory(sim)
        with pytest.raises(PermanentServiceError, match="maximum context length") as info:
            gw.generate("word " * 600, Sampling(max_tokens=16), job_id="long")
        assert info.value.attempts == 1 and info.value.job_id == "long"
        wrong_model = gateway_factory(sim, model="no-such-model")
        with pytest.raises(PermanentServiceError, match="QFARM_MODEL"):
            wrong_model.generate("hi", Sampling(), job_id="m")
        assert len(generation_requests(sim)) == 2  # one request each, no retries


def test_no_usable_endpoint_is_a_transient_error(gateway_factory) -> None:
    with start_simulator(**FAST) as sim:
        url = sim.url
    gw = open_gateway(Settings(llm_endpoints=url, llm_health_interval_s=0, llm_max_attempts=2,
                               llm_backoff_base_s=0.01, llm_connect_timeout_s=1.0))  # fmt: skip
    try:
        with pytest.raises(TransientServiceError, match="cannot connect") as info:
            gw.generate("p", Sampling(), job_id="j")
        assert info.value.attempts == 2
    finally:
        gw.close()


# --------------------------------------------------------------------------- batching and streaming


def warehouse_prompt(i: int, words: int = 0) -> str:
    text = f"Warehouse number {i} stores exactly {i * 7} crates of apples every single day."
    if words:
        text += " filler" * words
    ev = Evidence(id="E1", doc_id=f"w{i}", chunk_id=f"w{i}-0", title=f"Warehouse {i}", text=text,
                  score=1.0, offset_start=0, offset_end=len(text))  # fmt: skip
    policy = Policy(max_context_chars_by_mode={"quote": 100_000})
    return build_prompt(f"What does warehouse {i} store?", Mode.QUOTE, [ev], policy).text


def test_batched_results_map_to_their_jobs_when_choices_come_shuffled(gateway_factory) -> None:
    with start_simulator(**FAST, shuffle_choices=True, max_model_len=2048) as sim:
        gw = gateway_factory(sim, llm_batch_size=8, llm_batch_wait_ms=50)
        greedy = Sampling(temperature=0.0, max_tokens=100)
        items = [(warehouse_prompt(i), greedy, f"job-{i}") for i in range(24)]
        items[5] = (warehouse_prompt(5, words=3000), greedy, "job-5")  # fails its batch
        results = gw.generate_many(items)
        batch_sizes = [r["n_prompts"] for r in generation_requests(sim)]
    for i, result in enumerate(results):
        if i == 5:
            assert isinstance(result, PermanentServiceError) and result.job_id == "job-5"
            continue
        assert isinstance(result, Generation), result
        assert f"Warehouse number {i} stores" in result.text
    assert max(batch_sizes) > 1 and gw.batch_stats()["mean_batch_size"] > 1


def test_streaming_records_time_to_first_token(gateway_factory) -> None:
    with start_simulator(ttft_ms=80, tpot_ms=2, profile="clean") as sim:
        plain = gateway_factory(sim).generate(
            warehouse_prompt(3), Sampling(max_tokens=80), job_id="a"
        )
        streamed = gateway_factory(sim, llm_stream=True).generate(
            warehouse_prompt(3), Sampling(max_tokens=80), job_id="b"
        )
    assert streamed.text == plain.text and plain.ttft_ms is None
    assert 70 <= streamed.ttft_ms < streamed.llm_ms
    assert streamed.usage.completion_tokens == plain.usage.completion_tokens


# --------------------------------------------------------------------------- keys and configuration


def test_api_keys_are_sent_and_never_logged(
    gateway_factory, caplog: pytest.LogCaptureFixture
) -> None:
    key_a, key_b, wrong = "sk-alpha-7f3a9c2e1d", "sk-bravo-4b8e6d0a2c", "sk-wrong-0000111122"
    caplog.set_level(logging.DEBUG)
    with start_simulator(**FAST, api_key=key_a) as a, start_simulator(**FAST, api_key=key_b) as b:
        per_endpoint = f"{a.url}={key_a},{b.url}={key_b}"
        gw = gateway_factory(a, b, llm_api_keys=per_endpoint)
        results = run_many(gw, 12, threads=4)
        assert {g.endpoint for g in results} == {a.url, b.url}
        refused = gateway_factory(a, llm_api_key=wrong)
        with pytest.raises(PermanentServiceError, match="API key was refused") as info:
            refused.generate("p", Sampling(), job_id="j")
        texts = [str(info.value), repr(results), repr(gw.endpoint_states()), caplog.text,
                 a.log_tail(500), b.log_tail(500)]  # fmt: skip
    for text in texts:
        for key in (key_a, key_b, wrong):
            assert key not in text


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="QFARM_LLM_ENDPOINTS is empty"):
        open_gateway(Settings(llm_endpoints=""))
    with pytest.raises(ConfigError, match="not an http"):
        open_gateway(Settings(llm_endpoints="gpu1:8000"))
    with pytest.raises(ConfigError, match="entry 1 is not URL=KEY") as info:
        open_gateway(Settings(llm_endpoints="http://a:1", llm_api_keys="sk-lonely-secret"))
    assert "sk-lonely-secret" not in str(info.value)
    with pytest.raises(ConfigError, match="not in QFARM_LLM_ENDPOINTS"):
        open_gateway(Settings(llm_endpoints="http://a:1", llm_api_keys="http://b:2=k"))
