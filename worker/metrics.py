"""Worker-side operator metrics: count in memory, flush to Redis every few seconds.

The hot path only adds to an in-process ``Counters`` (a dict update under a lock):
rows by mode and verdict as they are written, result-cache hits and misses, and one
observation per LLM HTTP request (the gateway calls ``observe_request``). A daemon
thread, started in worker processes only (``start_flushing``, from Celery's worker
signals), sends the deltas with one pipelined HINCRBY batch every
``QFARM_METRICS_FLUSH_S`` seconds and refreshes this process's heartbeat hash (role,
node, and gauges: in-flight requests, breaker state and health per endpoint, read from the
gateway's balancer). The API's /metrics reads both (docs/api.md, 'Metrics').

Eager runs and tests never start the thread: their counts stay in memory, so an eager
run needs no Redis. A flush that fails puts its deltas back for the next one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from qfarm.common import keys
from qfarm.common import metrics as m
from qfarm.common.models import Row
from qfarm.common.settings import Settings

log = logging.getLogger("qfarm.metrics")

COUNTERS = m.Counters()
EndpointStates = Callable[[], list[dict[str, Any]]]
_state_sources: list[Callable[[], EndpointStates | None]] = []
_flusher: _Flusher | None = None
_guard = threading.Lock()


# ---------------------------------------------------------------- hot-path hooks

def observe_request(endpoint: str, seconds: float, error: BaseException | None) -> None:
    """One LLM HTTP request finished (the gateway's one call per request)."""
    COUNTERS.observe_request(endpoint, seconds, type(error).__name__ if error else None)


def watch_endpoints(states: EndpointStates) -> None:
    """Read in-flight counts and breaker states from ``states`` at each flush (the
    gateway's ``endpoint_states``); held weakly, so a closed gateway drops out."""
    ref: Any = weakref.WeakMethod(states) if hasattr(states, "__self__") else (lambda: states)
    with _guard:
        _state_sources.append(ref)


def count_rows(rows: Sequence[Row], written: Iterable[bool]) -> None:
    """Rows this process wrote (not the duplicates the write-once script refused)."""
    items: list[tuple[str, int]] = []
    for row, wrote in zip(rows, written, strict=True):
        if not wrote:
            continue
        verdict = row.grading.verdict.value if row.grading is not None and not row.error else "none"
        items.append((m.field(m.ROWS, row.mode.value, verdict), 1))
        if row.error:
            items.append((m.field(m.ROW_ERRORS, row.mode.value), 1))
        items += _cost_items(row)
    if items:
        COUNTERS.add_many(items)


def _cost_items(row: Row) -> list[tuple[str, int]]:
    """The row's tokens and model time (a hit of either cache cost nothing in this run)."""
    if row.cache_hit or row.response_cache_hit or (
        row.llm_request is None and row.usage.prompt_tokens is None
    ):
        return []
    endpoint, mode = row.endpoint or "(none)", row.mode.value
    estimated = "true" if row.usage.estimated else "false"
    items = [
        (m.field(m.LLM_PROMPT_TOKENS, endpoint, mode, estimated), row.usage.prompt_tokens or 0),
        (m.field(m.LLM_COMPLETION_TOKENS, endpoint, mode, estimated),
         row.usage.completion_tokens or 0),
    ]
    if row.llm_request is not None:
        share_us = row.llm_request.ms * 1000.0 / max(1, row.llm_request.prompts)
        items.append((m.field(m.LLM_MODEL_US, endpoint, mode), int(share_us)))
    return items


def count_cache(hits: int, misses: int) -> None:
    COUNTERS.add_many([(m.field(m.CACHE, "hit"), hits), (m.field(m.CACHE, "miss"), misses)])


# ---------------------------------------------------------------- flushing

def endpoint_gauges() -> dict[str, int]:
    """Heartbeat fields of the endpoints this process's gateways know:
    ``inflight|URL``, ``breaker|URL|STATE`` (1 for the current state) and ``down|URL``
    (1 while the process holds the endpoint out of rotation as unhealthy: its health
    check failing or its connections refused)."""
    with _guard:
        sources = list(_state_sources)
    out: dict[str, int] = {}
    for ref in sources:
        states = ref()
        if states is None:
            continue
        for e in states():
            url = str(e["endpoint"]).replace(m.SEP, "/")
            out[f"inflight{m.SEP}{url}"] = out.get(f"inflight{m.SEP}{url}", 0) + int(e["outstanding"])
            state = str(getattr(e["breaker"], "value", e["breaker"])).lower()
            out[f"breaker{m.SEP}{url}{m.SEP}{state}"] = 1
            down = 0 if e.get("healthy", True) else 1
            out[f"down{m.SEP}{url}"] = out.get(f"down{m.SEP}{url}", 0) + down
    return out


def heartbeat_ttl_s(interval_s: float) -> int:
    return max(3, int(interval_s * 3 + 1))


class _Flusher:
    def __init__(self, settings: Settings, *, node: str, queues: list[str]):
        import redis

        self.client = redis.Redis.from_url(
            settings.redis_url,
            socket_timeout=settings.broker_socket_timeout_s,
            socket_connect_timeout=settings.broker_socket_timeout_s,
        )
        self.interval_s = settings.metrics_flush_s
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.node, self.queues = node, queues
        self.pid = os.getpid()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="qfarm-metrics", daemon=True)

    def flush(self) -> None:
        deltas = COUNTERS.take()
        key = keys.worker_key(self.name)
        pipe = self.client.pipeline(transaction=False)
        for name, n in deltas.items():
            pipe.hincrby(keys.METRICS_COUNTERS_KEY, name, n)
        pipe.delete(key)  # gauges of an endpoint that went away must not linger
        fields: dict[str, str | int] = {
            "role": m.role_of(self.queues), "node": self.node, "queues": ",".join(self.queues),
        }
        fields.update(endpoint_gauges())
        pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
        # Three missed flushes and the worker counts as gone.
        pipe.expire(key, heartbeat_ttl_s(self.interval_s))
        pipe.zadd(keys.WORKERS_KEY, {self.name: time.time()})
        try:
            pipe.execute()
        except Exception as exc:  # Redis down: keep the counts for the next flush
            COUNTERS.add_many(deltas.items())
            log.debug("metrics flush failed: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def stop(self) -> None:
        self._stop.set()
        self.flush()
        try:
            self.client.delete(keys.worker_key(self.name))
            self.client.zrem(keys.WORKERS_KEY, self.name)
        except Exception:  # shutting down: a heartbeat that expires on its own is fine
            pass


def start_flushing(settings: Settings, *, node: str, queues: Iterable[str]) -> None:
    """Start this process's flusher (once per process; again after a fork)."""
    global _flusher
    if settings.metrics_flush_s <= 0:
        return
    with _guard:
        if _flusher is not None and _flusher.pid == os.getpid():
            return
        flusher = _flusher = _Flusher(settings, node=node, queues=sorted(queues))
    flusher.flush()  # the heartbeat exists from the start, not one interval later
    flusher.thread.start()


def stop_flushing() -> None:
    global _flusher
    with _guard:
        flusher, _flusher = _flusher, None
    if flusher is not None and flusher.pid == os.getpid():
        flusher.stop()
