"""Operator metrics: their names, and the counters workers accumulate before a flush.

Pure: no Redis here. Workers add to a ``Counters`` in memory on the hot path (a dict
update under a lock) and ``worker/metrics.py`` flushes the deltas to one Redis hash
(``keys.METRICS_COUNTERS_KEY``) every few seconds with one pipelined HINCRBY batch; the
API's /metrics (``producer/http/metrics.py``) reads that hash and renders it. A field
of the hash is the metric's short name and its label values joined by ``|``, e.g.
``rows|quote|STRICT``; label values never contain ``|`` (modes, verdicts, error class
names, endpoint URLs without credentials) and are cleaned of it anyway.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from qfarm.common.vocab import Role

SEP = "|"

# Latency buckets of one LLM HTTP request, in seconds (upper bounds; +Inf is implied).
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)

# Short names in the Redis hash → label names, in field order.
ROWS = "rows"  # mode, verdict ("none" for a row with an error)
ROW_ERRORS = "row_errors"  # mode
ENQUEUED = "enqueued"  # mode
LLM_REQUESTS = "llm_requests"  # endpoint
LLM_ERRORS = "llm_errors"  # endpoint, error class
LLM_LATENCY_BUCKET = "llm_latency_bucket"  # endpoint, bucket index (non-cumulative)
LLM_LATENCY_SUM = "llm_latency_sum_us"  # endpoint; microseconds, so HINCRBY stays integral
CACHE = "cache"  # result: hit, miss
# What rows cost (docs/reports.md, 'What a run cost'), counted as rows are written:
LLM_PROMPT_TOKENS = "llm_prompt_tokens"  # endpoint, mode, estimated ("true": no server usage)
LLM_COMPLETION_TOKENS = "llm_completion_tokens"  # endpoint, mode, estimated
LLM_MODEL_US = "llm_model_us"  # endpoint, mode; the answering requests' durations, microseconds

LABELS: dict[str, tuple[str, ...]] = {
    ROWS: ("mode", "verdict"),
    ROW_ERRORS: ("mode",),
    ENQUEUED: ("mode",),
    LLM_REQUESTS: ("endpoint",),
    LLM_ERRORS: ("endpoint", "error"),
    LLM_LATENCY_BUCKET: ("endpoint", "bucket"),
    LLM_LATENCY_SUM: ("endpoint",),
    CACHE: ("result",),
    LLM_PROMPT_TOKENS: ("endpoint", "mode", "estimated"),
    LLM_COMPLETION_TOKENS: ("endpoint", "mode", "estimated"),
    LLM_MODEL_US: ("endpoint", "mode"),
}

# The Prometheus names /metrics exposes (ops/grafana's dashboard may use only these).
EXPOSED_METRICS: tuple[str, ...] = (
    "qfarm_queue_messages",
    "qfarm_jobs_enqueued_total",
    "qfarm_rows_total",
    "qfarm_row_errors_total",
    "qfarm_rows_per_second",
    "qfarm_llm_requests_total",
    "qfarm_llm_request_errors_total",
    "qfarm_llm_request_seconds",
    "qfarm_llm_prompt_tokens_total",
    "qfarm_llm_completion_tokens_total",
    "qfarm_llm_model_seconds_total",
    "qfarm_llm_inflight",
    "qfarm_llm_breaker_state",
    "qfarm_llm_endpoint_down",
    "qfarm_workers",
    "qfarm_result_cache_total",
    "qfarm_result_cache_hit_ratio",
    "qfarm_api_requests_total",
)

BREAKER_STATES = ("closed", "half_open", "open")


def field(name: str, *labels: object) -> str:
    """The Redis hash field of metric ``name`` with these label values."""
    if len(labels) != len(LABELS[name]):
        raise ValueError(f"{name} takes labels {LABELS[name]}, got {labels!r}")
    return SEP.join([name, *(str(v).replace(SEP, "/") for v in labels)])


def parse_field(raw: str) -> tuple[str, tuple[str, ...]] | None:
    """(name, label values) of a hash field, None for a field this version does not know."""
    name, *labels = raw.split(SEP)
    if name not in LABELS or len(labels) != len(LABELS[name]):
        return None
    return name, tuple(labels)


Fields = dict[str, list[tuple[tuple[str, ...], int]]]


def parse_counters(counters: Mapping[str, int]) -> Fields:
    """The counter hash by metric name: (label values, value) in field order; one parse
    of every field, which each metric family then reads (unknown fields dropped)."""
    out: Fields = {}
    for raw, value in sorted(counters.items()):
        parsed = parse_field(raw)
        if parsed is not None:
            out.setdefault(parsed[0], []).append((parsed[1], value))
    return out


def bucket_index(seconds: float) -> int:
    """Index of the first bucket whose bound holds ``seconds`` (len(buckets) = +Inf)."""
    for i, bound in enumerate(LATENCY_BUCKETS_S):
        if seconds <= bound:
            return i
    return len(LATENCY_BUCKETS_S)


class Counters:
    """In-process counter deltas since the last flush; thread-safe and cheap to add to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, *labels: object, n: int = 1) -> None:
        key = field(name, *labels)
        with self._lock:
            self._counts[key] += n

    def add_many(self, items: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            for key, n in items:
                self._counts[key] += n

    def take(self) -> dict[str, int]:
        """The deltas so far, leaving zero behind (a failed flush puts them back with add_many)."""
        with self._lock:
            taken = {k: v for k, v in self._counts.items() if v}
            self._counts.clear()
        return taken

    def observe_request(self, endpoint: str, seconds: float, error: str | None) -> None:
        """One LLM HTTP request's outcome: count, latency bucket and sum, error class."""
        with self._lock:
            self._counts[field(LLM_REQUESTS, endpoint)] += 1
            self._counts[field(LLM_LATENCY_BUCKET, endpoint, bucket_index(seconds))] += 1
            self._counts[field(LLM_LATENCY_SUM, endpoint)] += int(seconds * 1_000_000)
            if error is not None:
                self._counts[field(LLM_ERRORS, endpoint, error)] += 1


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets (bound, count) ending with +Inf, and the sum in seconds."""

    buckets: list[tuple[str, int]]
    sum_s: float


def histograms(fields: Fields) -> dict[str, Histogram]:
    """Per-endpoint latency histograms from the parsed counter hash (``parse_counters``)."""
    per: dict[str, list[int]] = {}
    sums: dict[str, float] = {}
    for (endpoint, idx), value in fields.get(LLM_LATENCY_BUCKET, ()):
        if idx.isdigit() and int(idx) <= len(LATENCY_BUCKETS_S):
            per.setdefault(endpoint, [0] * (len(LATENCY_BUCKETS_S) + 1))[int(idx)] += value
    for (endpoint,), value in fields.get(LLM_LATENCY_SUM, ()):
        sums[endpoint] = sums.get(endpoint, 0.0) + value / 1_000_000
    out: dict[str, Histogram] = {}
    for endpoint in set(per) | set(sums):
        counts = per.get(endpoint, [0] * (len(LATENCY_BUCKETS_S) + 1))
        bounds = [f"{b:g}" for b in LATENCY_BUCKETS_S] + ["+Inf"]
        running, buckets = 0, []
        for bound, count in zip(bounds, counts, strict=True):
            running += count
            buckets.append((bound, running))
        out[endpoint] = Histogram(buckets=buckets, sum_s=sums.get(endpoint, 0.0))
    return out


def role_of(queues: Iterable[str]) -> str:
    """A worker's role from the queues it consumes, named as the Procfile names them."""
    qs = set(queues)
    if qs == {"interactive"}:
        return Role.INTERACTIVE
    if qs == {"generate"}:
        return Role.GPU
    if qs and qs <= {"retrieve", "verify"}:
        return Role.CPU
    return Role.MIXED
