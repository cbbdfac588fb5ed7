"""``qfarm cache``: the figures of the two caches (whole rows: the result cache; model
replies: the response cache), and removing entries from them.

Entries are found by SCAN over the cache's key prefix, a batch at a time (never KEYS,
which stops the server for the whole keyspace), and read and deleted a batch per round
trip, so a cache of millions of entries costs memory for one batch only."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import redis

from qfarm.common import keys
from qfarm.common.cache import (
    CacheEntry,
    CacheFilter,
    CachePrune,
    CacheStats,
    read_entry,
    read_response_entry,
)
from qfarm.common.errors import InputError
from qfarm.common.settings import Settings
from qfarm.common.vocab import CacheKind

BATCH = 500
BOTH = (CacheKind.RESULT, CacheKind.RESPONSE)
_PATTERN = {CacheKind.RESULT: keys.CACHE_PATTERN, CacheKind.RESPONSE: keys.RESPONSE_CACHE_PATTERN}
_READ: dict[CacheKind, Callable[[bytes | str], CacheEntry]] = {
    CacheKind.RESULT: read_entry, CacheKind.RESPONSE: read_response_entry}


def _batches(client: redis.Redis, kind: CacheKind = CacheKind.RESULT) -> Iterator[list[bytes | str]]:
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=_PATTERN[kind], count=BATCH)
        if found:
            yield list(found)
        if cursor == 0:
            return


def cache_stats(settings: Settings, kind: CacheKind = CacheKind.RESULT) -> CacheStats:
    """Every entry's figures (each value is read: its size, model, index version or served
    revision, and finished_at or created_at). ``ServiceUnreachableError`` when Redis does
    not answer."""
    from qfarm.producer.store import connect

    client = connect(settings.redis_url)
    stats = CacheStats(ttl_s=keys.RESPONSE_CACHE_TTL_S if kind is CacheKind.RESPONSE
                       else keys.CACHE_TTL_S)
    read = _READ[kind]
    for batch in _batches(client, kind):
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.get(key)
            pipe.ttl(key)
        replies = pipe.execute()
        for raw, ttl in zip(replies[::2], replies[1::2], strict=True):
            if raw is not None:  # None: it expired since the SCAN
                stats.add(read(raw), expires=ttl != -1)
    return stats


def prune_cache(settings: Settings, selected: CacheFilter, *, all_entries: bool = False,
                dry_run: bool = False, now: float | None = None,
                kinds: tuple[CacheKind, ...] = BOTH) -> CachePrune:
    """Delete the entries of ``kinds`` that ``selected`` matches (every entry with
    ``all_entries``); a dry run counts them only. Refuses (``InputError``) no filter without
    ``all_entries``, and both at once. A response entry has no index version: a
    ``--index-version`` filter never selects one."""
    if selected.empty and not all_entries:
        raise InputError(
            "cache prune: no filter given, so nothing to select; give --older-than DAYS, "
            "--model M or --index-version V, or --all to empty the whole cache "
            "(--dry-run counts first)")
    if all_entries and not selected.empty:
        raise InputError(
            "cache prune: --all removes every entry, so it takes no filter; give either "
            "--all alone or the filters (--older-than, --model, --index-version) without it")
    from qfarm.producer.store import connect

    client = connect(settings.redis_url)
    moment = time.time() if now is None else now
    matched = deleted = 0
    for kind in kinds:
        read = _READ[kind]
        for batch in _batches(client, kind):
            if all_entries:
                chosen = batch
            else:
                raws = client.mget(batch)
                chosen = [key for key, raw in zip(batch, raws, strict=True)
                          if raw is not None and selected.matches(read(raw), moment)]
            matched += len(chosen)
            if chosen and not dry_run:
                deleted += int(client.unlink(*chosen))
    return CachePrune(matched, deleted, dry_run)
