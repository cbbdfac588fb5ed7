"""/metrics: the farm's counters and gauges, read from Redis at each scrape.

Workers on any host flush their counters to one Redis hash and refresh a heartbeat
hash per process (worker/metrics.py); this collector reads both, the queue lengths
(LLEN of each Stage's queue) and renders them with prometheus-client. Nothing here is
per-API-process except ``qfarm_api_requests_total`` and the rows-per-second estimate,
so any number of API processes report the same farm.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from qfarm.common import metrics as m
from qfarm.common.vocab import WORKER_ROLES, Role
from qfarm.producer.store import ProducerStore

WINDOW_S = 60.0  # rows per second: over the last minute of scrapes


class FarmCollector(Collector):
    def __init__(self, store: ProducerStore) -> None:
        self.store = store
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()
        self.api_requests: dict[tuple[str, str], int] = {}

    def count_request(self, route: str, status: int) -> None:
        key = (route, str(status))
        with self._lock:
            self.api_requests[key] = self.api_requests.get(key, 0) + 1

    def _rows_per_second(self, total: int) -> float:
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, total))
            while len(self._samples) > 2 and now - self._samples[1][0] >= WINDOW_S:
                self._samples.popleft()
            t0, n0 = self._samples[0]
        return (total - n0) / (now - t0) if now > t0 else 0.0

    def collect(self) -> Iterator[Metric]:
        counters = self.store.metric_counters()
        fields = m.parse_counters(counters)  # once per scrape, for every family below
        yield from self._queues()
        yield from self._rows(fields)
        yield from self._llm(fields)
        yield from self._workers()
        yield from self._cache(counters)
        api = CounterMetricFamily("qfarm_api_requests", "HTTP requests this API process served",
                                  labels=["route", "status"])
        with self._lock:
            for (route, status), n in sorted(self.api_requests.items()):
                api.add_metric([route, status], n)
        yield api

    def _queues(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("qfarm_queue_messages",
                              "messages waiting per queue (sweep messages carry up to "
                              "QFARM_BUNDLE_SIZE jobs)", labels=["queue"])
        for queue, n in self.store.queue_lengths().items():
            g.add_metric([queue], n)
        yield g

    def _rows(self, fields: m.Fields) -> Iterator[Metric]:
        enq = CounterMetricFamily("qfarm_jobs_enqueued", "jobs sent to the queues",
                                  labels=["mode"])
        rows = CounterMetricFamily("qfarm_rows", "rows written (verdict none: the row has an error)",
                                   labels=["mode", "verdict"])
        errs = CounterMetricFamily("qfarm_row_errors", "rows written with an error",
                                   labels=["mode"])
        for family, name in ((enq, m.ENQUEUED), (rows, m.ROWS), (errs, m.ROW_ERRORS)):
            for labels, value in fields.get(name, ()):
                family.add_metric(list(labels), value)
        total = sum(value for _, value in fields.get(m.ROWS, ()))
        yield from (enq, rows, errs)
        rate = GaugeMetricFamily("qfarm_rows_per_second",
                                 f"rows written per second over the last {WINDOW_S:.0f} s of scrapes")
        rate.add_metric([], self._rows_per_second(total))
        yield rate

    def _llm(self, fields: m.Fields) -> Iterator[Metric]:
        req = CounterMetricFamily("qfarm_llm_requests", "HTTP requests to each LLM endpoint",
                                  labels=["endpoint"])
        err = CounterMetricFamily("qfarm_llm_request_errors",
                                  "failed LLM requests by error class", labels=["endpoint", "error"])
        for family, name in ((req, m.LLM_REQUESTS), (err, m.LLM_ERRORS)):
            for labels, value in fields.get(name, ()):
                family.add_metric(list(labels), value)
        yield from (req, err)
        yield from self._cost(fields)
        hist = HistogramMetricFamily("qfarm_llm_request_seconds",
                                     "latency of one LLM HTTP request", labels=["endpoint"])
        for endpoint, h in sorted(m.histograms(fields).items()):
            hist.add_metric([endpoint], h.buckets, h.sum_s)
        yield hist

    def _cost(self, fields: m.Fields) -> Iterator[Metric]:
        """Tokens and model time of the rows written (docs/reports.md, 'What a run cost')."""
        labels = ["endpoint", "mode", "estimated"]
        prompt = CounterMetricFamily(
            "qfarm_llm_prompt_tokens", "prompt tokens of the requests that answered jobs "
            "(estimated=true: the server gave no usage, counted as characters / 4)", labels=labels)
        completion = CounterMetricFamily(
            "qfarm_llm_completion_tokens", "completion tokens of the answers (estimated=true: "
            "the server gave no usage, counted as characters / 4)", labels=labels)
        for family, name in ((prompt, m.LLM_PROMPT_TOKENS), (completion, m.LLM_COMPLETION_TOKENS)):
            for values, value in fields.get(name, ()):
                family.add_metric(list(values), value)
        model = CounterMetricFamily(
            "qfarm_llm_model_seconds", "model seconds: the durations of the requests that "
            "answered jobs, summed (a micro-batch's shared among its prompts)",
            labels=["endpoint", "mode"])
        for values, value in fields.get(m.LLM_MODEL_US, ()):
            model.add_metric(list(values), value / 1_000_000)
        yield from (prompt, completion, model)

    def _workers(self) -> Iterator[Metric]:
        live = self.store.live_workers()
        nodes: dict[str, set[str]] = {}
        inflight: dict[str, int] = {}
        down: dict[str, int] = {}
        breaker: dict[tuple[str, str], int] = {}
        for w in live:
            nodes.setdefault(w.role, set()).add(w.node)
            for key, value in w.gauges.items():
                kind, _, rest = key.partition(m.SEP)
                if kind == "inflight":
                    inflight[rest] = inflight.get(rest, 0) + value
                elif kind == "down":
                    down[rest] = down.get(rest, 0) + value
                elif kind == "breaker":
                    url, _, state = rest.rpartition(m.SEP)
                    breaker[(url, state)] = max(breaker.get((url, state), 0), value)
        workers = GaugeMetricFamily("qfarm_workers", "live Celery workers (nodes) by role",
                                    labels=["role"])
        for role in (*WORKER_ROLES, Role.MIXED):
            workers.add_metric([role], len(nodes.get(role, ())))
        yield workers
        g = GaugeMetricFamily("qfarm_llm_inflight", "LLM requests in flight per endpoint "
                              "(summed over worker processes)", labels=["endpoint"])
        for url, n in sorted(inflight.items()):
            g.add_metric([url], n)
        yield g
        b = GaugeMetricFamily("qfarm_llm_breaker_state",
                              "1 if any worker process holds the endpoint's breaker in this "
                              "state", labels=["endpoint", "state"])
        for url in sorted({u for u, _ in breaker}):
            for state in m.BREAKER_STATES:
                b.add_metric([url, state], breaker.get((url, state), 0))
        yield b
        d = GaugeMetricFamily("qfarm_llm_endpoint_down",
                              "worker processes holding the endpoint out of rotation as "
                              "unhealthy (health check failing, connections refused)",
                              labels=["endpoint"])
        for url, n in sorted(down.items()):
            d.add_metric([url], n)
        yield d

    def _cache(self, counters: dict[str, int]) -> Iterator[Metric]:
        hits = counters.get(m.field(m.CACHE, "hit"), 0)
        misses = counters.get(m.field(m.CACHE, "miss"), 0)
        c = CounterMetricFamily("qfarm_result_cache", "result-cache lookups", labels=["result"])
        c.add_metric(["hit"], hits)
        c.add_metric(["miss"], misses)
        yield c
        ratio = GaugeMetricFamily("qfarm_result_cache_hit_ratio",
                                  "hits / lookups since the counters began (NaN before any)")
        ratio.add_metric([], hits / (hits + misses) if hits + misses else float("nan"))
        yield ratio
