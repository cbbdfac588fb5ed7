"""The two caches' entries as ``qfarm cache`` sees them: which entries an operator's
filters select, and the figures of a set of entries. The Redis side is the producer's
(``producer/farm/cache.py``). A result-cache entry's value is the cached row's JSON
(worker/store.py); a response-cache entry's is a ``ResponseEntry``, one model reply
(worker/llm/response_cache.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from qfarm.common import keys
from qfarm.common.models import Frozen, Usage

# The name an entry without a model or an index version is counted under.
NONE = "(none)"


@dataclass(frozen=True)
class CacheEntry:
    """What ``qfarm cache`` reads of one cached row; all None when the value is not a row
    (``readable`` False): such an entry is counted, and only ``--all`` removes it."""

    size: int  # bytes of the stored value
    readable: bool = True
    model: str | None = None
    index_version: str | None = None
    finished_at: float | None = None
    # A response-cache entry: the served model's root (or id) as its endpoint reported it.
    revision: str | None = None


class ResponseEntry(Frozen):
    """One model reply in the response cache: what a hit gives the job again. Only a
    complete reply (finish reason ``stop``) is ever stored."""

    schema_version: int = 1
    model: str
    # What the endpoint said it serves (``/v1/models``: id, root, max_model_len, owned_by;
    # the server's name when it is not vLLM): part of the key, kept here for ``qfarm cache``.
    served: dict[str, Any]
    text: str
    finish_reason: str
    usage: Usage
    # The model time the reply took: its request's duration, shared among the answers the
    # request carried (a micro-batch's prompts, a shared request's choices).
    model_ms: float
    simulated: bool = False
    server: str | None = None
    max_tokens_effective: int | None = None
    created_at: float

    @property
    def revision(self) -> str | None:
        found = self.served.get("root") or self.served.get("id")
        return str(found) if found else None


def read_response_entry(raw: bytes | str) -> CacheEntry:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    try:
        entry = ResponseEntry.model_validate_json(raw)
    except (ValidationError, ValueError):
        return CacheEntry(size, readable=False)
    return CacheEntry(size, model=entry.model, finished_at=entry.created_at,
                      revision=entry.revision)


def read_entry(raw: bytes | str) -> CacheEntry:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    try:
        row = json.loads(raw)
    except ValueError:
        return CacheEntry(size, readable=False)
    if not isinstance(row, dict):
        return CacheEntry(size, readable=False)
    finished = row.get("finished_at")
    # The row's own model field names what answered; an older row may carry only the
    # configured id.
    model = row.get("model") or row.get("model_profile_id")
    return CacheEntry(
        size,
        model=str(model) if model else None,
        index_version=str(row["index_version"]) if row.get("index_version") else None,
        finished_at=float(finished) if isinstance(finished, int | float) else None,
    )


@dataclass(frozen=True)
class CacheFilter:
    """Which entries ``qfarm cache prune`` removes: every given condition holds. An entry
    whose row has no ``finished_at`` has no age, so ``older_than_s`` never selects it."""

    older_than_s: float | None = None
    model: str | None = None
    index_version: str | None = None

    @property
    def empty(self) -> bool:
        return self.older_than_s is None and self.model is None and self.index_version is None

    def matches(self, entry: CacheEntry, now: float) -> bool:
        if not entry.readable:
            return False
        if self.older_than_s is not None and (
            entry.finished_at is None or entry.finished_at >= now - self.older_than_s
        ):
            return False
        if self.model is not None and entry.model != self.model:
            return False
        return self.index_version is None or entry.index_version == self.index_version


@dataclass
class CacheStats:
    """The figures of the entries added: counts, bytes, counts by model and by index
    version, the oldest and newest row, and the expiry every entry is written with."""

    entries: int = 0
    bytes: int = 0
    unreadable: int = 0
    no_expiry: int = 0  # entries Redis keeps for ever (written by hand, or PERSISTed)
    by_model: dict[str, int] = field(default_factory=dict)
    by_index_version: dict[str, int] = field(default_factory=dict)
    by_revision: dict[str, int] = field(default_factory=dict)
    oldest: float | None = None
    newest: float | None = None
    ttl_s: int = keys.CACHE_TTL_S

    def add(self, entry: CacheEntry, *, expires: bool = True) -> None:
        self.entries += 1
        self.bytes += entry.size
        if not expires:
            self.no_expiry += 1
        if not entry.readable:
            self.unreadable += 1
            return
        model, index = entry.model or NONE, entry.index_version or NONE
        self.by_model[model] = self.by_model.get(model, 0) + 1
        self.by_index_version[index] = self.by_index_version.get(index, 0) + 1
        if entry.revision is not None:
            self.by_revision[entry.revision] = self.by_revision.get(entry.revision, 0) + 1
        if entry.finished_at is not None:
            self.oldest = min(self.oldest or entry.finished_at, entry.finished_at)
            self.newest = max(self.newest or entry.finished_at, entry.finished_at)

    def as_json(self) -> dict[str, Any]:
        return {"entries": self.entries, "bytes": self.bytes, "unreadable": self.unreadable,
                "no_expiry": self.no_expiry, "ttl_s": self.ttl_s,
                "by_model": dict(sorted(self.by_model.items())),
                "by_index_version": dict(sorted(self.by_index_version.items())),
                **({"by_revision": dict(sorted(self.by_revision.items()))}
                   if self.by_revision else {}),
                "oldest_finished_at": self.oldest, "newest_finished_at": self.newest}


@dataclass(frozen=True)
class CachePrune:
    """What ``qfarm cache prune`` did: entries selected, and deleted (0 on a dry run)."""

    matched: int
    deleted: int
    dry_run: bool

    def as_json(self) -> dict[str, Any]:
        return {"matched": self.matched, "deleted": self.deleted, "dry_run": self.dry_run}
