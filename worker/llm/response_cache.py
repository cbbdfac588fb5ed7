"""The response cache: a model reply, kept so that the exact same request is answered
again without spending the model's time (docs/llm.md, 'Response cache').

The key is ``keys.response_cache_digest``: what the endpoint said it serves (``served``,
read from ``/v1/models`` when the gateway starts) and the request body as it would be
sent for one job alone (its own seed, ``n`` 1), less the fields that only change how a
reply travels. A different model, server, context window or any sampling parameter is
another key; an endpoint that did not describe itself is never looked up or stored.

What may be cached (``is_cacheable``): only a request of a run that asked (``--cache``,
``Sampling.cache``), never unseeded sampling at a temperature above 0 (its next answer is
meant to differ). What is stored (``is_storable``): a complete reply (finish reason
``stop``) whose budget was not lowered; errors, truncated and malformed replies never.

Two stores: ``RedisResponseCache`` for the farm (every worker shares it, entries expire
after ``keys.RESPONSE_CACHE_TTL_S``) and ``MemoryResponseCache`` for eager runs, one per
process (``process_response_cache``), so the runs of one process share it. A store that
fails (Redis away) is a miss, never a job's error: the cache only ever saves time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import redis

from qfarm.common import keys
from qfarm.common.cache import ResponseEntry
from qfarm.common.models import Generation, Sampling

log = logging.getLogger("qfarm.llm")

# Entries one eager process keeps; a sweep of 10,000 jobs with 2 kB answers is ~20 MB.
MEMORY_ENTRIES = 50_000


class ResponseStore(Protocol):
    """Where entries live: raw JSON by key, many at a time (one round trip per group)."""

    def get_many(self, cache_keys: Sequence[str]) -> list[str | bytes | None]: ...

    def put_many(self, entries: Sequence[tuple[str, str]]) -> None: ...

    #: True when a call does I/O: the gateway then runs it off its event loop.
    blocking: bool


class RedisResponseCache:
    """Entries in Redis, shared by every process of the farm."""

    blocking = True

    def __init__(self, client: redis.Redis, ttl_s: int = keys.RESPONSE_CACHE_TTL_S):
        self.client = client
        self.ttl_s = ttl_s

    def get_many(self, cache_keys: Sequence[str]) -> list[str | bytes | None]:
        return list(self.client.mget([keys.response_cache_key(k) for k in cache_keys]))

    def put_many(self, entries: Sequence[tuple[str, str]]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for key, raw in entries:
            pipe.set(keys.response_cache_key(key), raw, ex=self.ttl_s)
        pipe.execute()


class MemoryResponseCache:
    """Entries in this process (an LRU): eager runs, which have no shared Redis."""

    blocking = False

    def __init__(self, max_entries: int = MEMORY_ENTRIES):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, cache_keys: Sequence[str]) -> list[str | bytes | None]:
        with self._lock:
            found: list[str | bytes | None] = []
            for key in cache_keys:
                raw = self._entries.get(key)
                if raw is not None:
                    self._entries.move_to_end(key)
                found.append(raw)
            return found

    def put_many(self, entries: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            for key, raw in entries:
                self._entries[key] = raw
                self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_process_cache: MemoryResponseCache | None = None
_process_lock = threading.Lock()


def process_response_cache() -> MemoryResponseCache:
    """This process's in-memory response cache, shared by its eager runs."""
    global _process_cache
    with _process_lock:
        if _process_cache is None:
            _process_cache = MemoryResponseCache()
        return _process_cache


def is_cacheable(sampling: Sampling, body: dict[str, Any]) -> bool:
    """Whether a request may be looked up and stored at all."""
    if not sampling.cache:
        return False
    # Unseeded sampling is meant to give another answer each time: never pinned by a cache.
    return not (body.get("seed") is None and float(body.get("temperature") or 0.0) > 0.0)


def is_storable(gen: Generation) -> bool:
    """A complete answer: it finished by itself (not cut at ``max_tokens``), with text."""
    return gen.finish_reason == "stop" and not gen.truncated and bool(gen.text)


def entry_for(gen: Generation, model: str, served: dict[str, Any]) -> ResponseEntry:
    """What a fresh answer leaves in the cache."""
    if gen.request is not None:
        model_ms = gen.request.ms / max(1, gen.request.prompts)
    else:
        model_ms = gen.llm_ms
    return ResponseEntry(
        model=model,
        served=served,
        text=gen.text,
        finish_reason=gen.finish_reason or "stop",
        usage=gen.usage,
        model_ms=round(model_ms, 3),
        simulated=gen.simulated,
        server=gen.server,
        max_tokens_effective=gen.max_tokens_effective,
        created_at=time.time(),
    )


def generation_from(entry: ResponseEntry, started: float) -> Generation:
    """A hit as a job's answer: the reply and its tokens as they were, no request made
    (``attempts`` 0, no ``request``: the cost table counts no model time for it), and the
    model time it first took as ``model_ms_saved``."""
    return Generation(
        text=entry.text,
        finish_reason=entry.finish_reason,
        endpoint=None,
        attempts=0,
        usage=entry.usage,
        request=None,
        llm_ms=round((time.perf_counter() - started) * 1000.0, 3),
        simulated=entry.simulated,
        server=entry.server,
        truncated=False,
        max_tokens_effective=entry.max_tokens_effective,
        response_cache_hit=True,
        model_ms_saved=entry.model_ms,
    )


def decode(raw: str | bytes | None) -> ResponseEntry | None:
    """An entry, or None for a miss or a value this qfarm cannot read (an older schema)."""
    if raw is None:
        return None
    try:
        return ResponseEntry.model_validate_json(raw)
    except ValueError:
        log.debug("unreadable response-cache entry ignored", exc_info=True)
        return None


class ResponseCache:
    """The gateway's side of a store: lookups and writes that never fail a request, and
    that leave the event loop free while Redis answers."""

    def __init__(self, store: ResponseStore, model: str):
        self.store = store
        self.model = model
        self.hits = 0
        self.misses = 0
        self.stored = 0

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self.store.blocking:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def lookup(self, cache_keys: Sequence[str]) -> list[ResponseEntry | None]:
        try:
            raws = await self._call(self.store.get_many, list(cache_keys))
        except Exception as exc:  # the cache saves time; its outage must not cost a job
            log.warning("response cache unreadable, asking the model: %s", exc)
            return [None] * len(cache_keys)
        found = [decode(raw) for raw in raws]
        return found

    def count(self, found: Sequence[ResponseEntry | None], *, used: bool) -> None:
        if used:
            self.hits += len(found)
        else:
            self.misses += len(found)

    async def store_many(self, entries: Sequence[tuple[str, ResponseEntry]]) -> None:
        if not entries:
            return
        try:
            await self._call(
                self.store.put_many, [(key, entry.model_dump_json()) for key, entry in entries]
            )
        except Exception as exc:
            log.warning("response cache not written: %s", exc)
            return
        self.stored += len(entries)
