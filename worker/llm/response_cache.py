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
``stop``, with text); errors, truncated and malformed replies never.

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
from qfarm.worker.llm.balancer import EndpointState
from qfarm.worker.llm.client import build_body
from qfarm.worker.llm.replies import fit_context

log = logging.getLogger("qfarm.llm")

# Entries one eager process keeps; a sweep of 10,000 jobs with 2 kB answers is ~20 MB.
MEMORY_ENTRIES = 50_000


class ResponseStore(Protocol):
    """Where entries live: raw JSON by key, many at a time (one round trip per group)."""

    def get_many(self, digests: Sequence[str]) -> list[str | bytes | None]: ...

    def put_many(self, entries: Sequence[tuple[str, str]]) -> None: ...

    #: True when a call does I/O: the gateway then runs it off its event loop.
    blocking: bool


class RedisResponseCache:
    """Entries in Redis, shared by every process of the farm."""

    blocking = True

    def __init__(self, client: redis.Redis, ttl_s: int = keys.RESPONSE_CACHE_TTL_S):
        self.client = client
        self.ttl_s = ttl_s

    def get_many(self, digests: Sequence[str]) -> list[str | bytes | None]:
        return list(self.client.mget([keys.response_cache_key(k) for k in digests]))

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

    def get_many(self, digests: Sequence[str]) -> list[str | bytes | None]:
        with self._lock:
            found: list[str | bytes | None] = []
            for key in digests:
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


def cache_keys(
    model: str, ep: EndpointState, prompt: str, sent: Sampling, count: int
) -> list[str] | None:
    """Each job's key on ``ep`` for a group of ``count`` samples of one prompt: the body of
    its request alone (the group's seed + j, ``n`` 1: vLLM answers choice j of a request
    seeded s as a lone request seeded s + j), as this endpoint would be sent it. None: not
    cacheable there (the endpoint described nothing, or unseeded sampling)."""
    if ep.served is None:
        return None
    out = []
    for j in range(count):
        one = sent.model_copy(update={"seed": sent.seed + j, "n": 1})
        body = build_body(
            model,
            [prompt],
            one,
            stream=False,
            dialect=ep.target.dialect,
            priority=ep.target.priority,
        )
        if not is_cacheable(one, body):
            return None
        out.append(keys.response_cache_digest(ep.served, body))
    return out


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

    async def lookup(self, digests: Sequence[str]) -> list[ResponseEntry | None]:
        try:
            raws = await self._call(self.store.get_many, list(digests))
        except Exception as exc:  # the cache saves time; its outage must not cost a job
            log.warning("response cache unreadable, asking the model: %s", exc)
            return [None] * len(digests)
        return [decode(raw) for raw in raws]

    async def answer(
        self,
        endpoints: Sequence[EndpointState],
        prompt: str,
        sampling: Sampling,
        count: int,
        started: float,
    ) -> list[Generation] | None:
        """A group's answers (one job: ``count`` 1) from the cache, when every job's is there
        under the key of one endpoint (endpoints that serve the same model the same way
        share keys, so this is one lookup on a farm of like servers); None: ask the model.
        Before any endpoint slot is taken: a hit waits for no server."""
        seen: set[tuple[str, ...]] = set()
        for ep in endpoints:
            sent = fit_context(prompt, sampling, ep.max_model_len)
            found_keys = cache_keys(self.model, ep, prompt, sent, count)
            if found_keys is None or tuple(found_keys) in seen:
                continue
            seen.add(tuple(found_keys))
            entries = await self.lookup(found_keys)
            hits = [e for e in entries if e is not None]
            if len(hits) == count:
                self.hits += count
                return [generation_from(e, started) for e in hits]
        if seen:
            self.misses += count
        return None

    async def keep(
        self, ep: EndpointState, prompt: str, sent: Sampling, gens: list[Generation]
    ) -> list[Generation]:
        """Fresh answers of a --cache run, from ``ep`` under ``sent``: the complete ones
        stored, all marked as not from the cache."""
        found_keys = cache_keys(self.model, ep, prompt, sent, len(gens))
        if found_keys is not None and ep.served is not None:
            served = ep.served
            await self.store_many(
                [
                    (key, entry_for(gen, self.model, served))
                    for key, gen in zip(found_keys, gens, strict=True)
                    if is_storable(gen)
                ]
            )
        return [g.model_copy(update={"response_cache_hit": False}) for g in gens]

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
