"""Worker counters reach /metrics through Redis: flush, heartbeat, collector."""

from __future__ import annotations

import os

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from qfarm.common import keys
from qfarm.common import metrics as m
from qfarm.common.models import LlmRequest, Mode, Row, Usage
from qfarm.common.settings import Settings
from qfarm.producer.http.metrics import FarmCollector
from qfarm.producer.store import ProducerStore
from qfarm.worker import metrics

PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))


@pytest.fixture
def client():
    c = redis.Redis(port=PORT, db=DB)
    c.flushdb()
    metrics.COUNTERS.take()
    # Gateways other tests built in this process (not yet collected) would add their gauges.
    metrics._state_sources.clear()
    yield c
    metrics.stop_flushing()
    c.flushdb()


def samples(store: ProducerStore) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FarmCollector(store))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def row(mode: str, *, error: str | None = None, verdict: str | None = "STRICT") -> Row:
    data = {"run_id": "r", "job_id": f"j{mode}{error}{verdict}", "question": "q",
            "question_id": "q", "mode": mode, "sample_index": 0, "error": error}
    if verdict:
        data["verdict"] = verdict
    return Row.model_validate(data)


def test_flushed_counters_and_heartbeat_show_on_the_collector(client):
    settings = Settings(redis_url=f"redis://127.0.0.1:{PORT}/{DB}", metrics_flush_s=60)
    rows = [row("quote"), row("quote"), row("claim_lattice", verdict="HYBRID"),
            row("quote", error="internal: boom", verdict=None)]
    metrics.count_rows(rows, [True, False, True, True])  # the second was a duplicate
    metrics.count_cache(hits=3, misses=1)
    metrics.observe_request("http://gpu1:8000", 0.2, None)
    metrics.observe_request("http://gpu1:8000", 0.2, TimeoutError())

    class Gateway:
        def endpoint_states(self):
            return [{"endpoint": "http://gpu1:8000", "outstanding": 5, "breaker": "open",
                     "healthy": True},
                    {"endpoint": "http://gpu2:8000", "outstanding": 0, "breaker": "closed",
                     "healthy": False}]

    gw = Gateway()
    metrics.watch_endpoints(gw.endpoint_states)
    metrics.start_flushing(settings, node="gpu@host", queues=["generate"])  # flushes at once
    store = ProducerStore(client)
    store.count_enqueued({"quote": 7})
    got = samples(store)
    assert got[("qfarm_rows_total", (("mode", "quote"), ("verdict", "STRICT")))] == 1
    assert got[("qfarm_rows_total", (("mode", "claim_lattice"), ("verdict", "HYBRID")))] == 1
    assert got[("qfarm_rows_total", (("mode", "quote"), ("verdict", "none")))] == 1
    assert got[("qfarm_row_errors_total", (("mode", "quote"),))] == 1
    assert got[("qfarm_jobs_enqueued_total", (("mode", "quote"),))] == 7
    assert got[("qfarm_result_cache_hit_ratio", ())] == 0.75
    ep = (("endpoint", "http://gpu1:8000"),)
    assert got[("qfarm_llm_requests_total", ep)] == 2
    assert got[("qfarm_llm_request_errors_total", ep + (("error", "TimeoutError"),))] == 1
    assert got[("qfarm_llm_request_seconds_bucket", ep + (("le", "0.25"),))] == 2
    assert got[("qfarm_llm_inflight", ep)] == 5
    assert got[("qfarm_llm_breaker_state", ep + (("state", "open"),))] == 1
    assert got[("qfarm_llm_breaker_state", ep + (("state", "closed"),))] == 0
    assert got[("qfarm_llm_endpoint_down", ep)] == 0
    assert got[("qfarm_llm_endpoint_down", (("endpoint", "http://gpu2:8000"),))] == 1
    assert got[("qfarm_workers", (("role", "gpu"),))] == 1
    assert got[("qfarm_queue_messages", (("queue", "retrieve"),))] == 0
    # Every family the collector renders is one the dashboard may use.
    names = {name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count")
             .removesuffix("_sum") for name, _ in got}
    assert names <= {e.removesuffix("_total") for e in m.EXPOSED_METRICS}


def test_a_stopped_worker_leaves_the_live_set(client):
    settings = Settings(redis_url=f"redis://127.0.0.1:{PORT}/{DB}", metrics_flush_s=60)
    metrics.start_flushing(settings, node="cpu@host", queues=["retrieve", "verify"])
    store = ProducerStore(client)
    assert [w.role for w in store.live_workers()] == ["cpu"]
    metrics.stop_flushing()
    assert store.live_workers() == []
    assert client.zcard(keys.WORKERS_KEY) == 0


def test_a_failed_flush_keeps_the_counts(client):
    settings = Settings(redis_url="redis://127.0.0.1:9/0", metrics_flush_s=60,
                        broker_socket_timeout_s=0.5)
    metrics.count_rows([row("quote")], [True])
    flusher = metrics._Flusher(settings, node="n", queues=["retrieve"])
    flusher.flush()  # nothing listens on port 9
    assert metrics.COUNTERS.take() == {m.field(m.ROWS, Mode.QUOTE.value, "STRICT"): 1}


def test_rows_count_their_tokens_and_model_seconds(client):
    settings = Settings(redis_url=f"redis://127.0.0.1:{PORT}/{DB}", metrics_flush_s=60)

    def costly(job: str, *, estimated: bool = False, cache_hit: bool = False,
               prompts: int = 1) -> Row:
        return row("quote").model_copy(update={
            "job_id": job, "endpoint": "http://gpu1:8000", "cache_hit": cache_hit,
            "usage": Usage(prompt_tokens=100, completion_tokens=20, estimated=estimated),
            "llm_request": LlmRequest(sent_at=0.0, ms=2000.0, prompts=prompts),
        })

    metrics.count_rows([costly("a"), costly("b", prompts=2), costly("c", estimated=True),
                        costly("d", cache_hit=True), costly("e")], [True, True, True, True, False])
    metrics.start_flushing(settings, node="gpu@host", queues=["generate"])
    got = samples(ProducerStore(client))
    labels = (("endpoint", "http://gpu1:8000"), ("estimated", "false"), ("mode", "quote"))
    assert got[("qfarm_llm_prompt_tokens_total", labels)] == 200
    assert got[("qfarm_llm_completion_tokens_total", labels)] == 40
    estimated = (("endpoint", "http://gpu1:8000"), ("estimated", "true"), ("mode", "quote"))
    assert got[("qfarm_llm_prompt_tokens_total", estimated)] == 100
    # 2 s + half of a 2 s request shared by two prompts + 2 s; the cache hit cost nothing
    seconds = (("endpoint", "http://gpu1:8000"), ("mode", "quote"))
    assert got[("qfarm_llm_model_seconds_total", seconds)] == pytest.approx(5.0)
