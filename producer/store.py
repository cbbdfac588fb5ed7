"""Producer-side Redis access: manifests, progress counters, streaming rows, cancel, purge."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import redis

from common import keys
from common.errors import ConfigError
from common.models import Manifest


def redact_url(url: str) -> str:
    """A Redis URL safe to print: every password (userinfo or ``?password=``) replaced by ***.

    Split the way redis-py splits it (``urlsplit``: the userinfo ends at the last ``@``
    of the authority, so a password may contain ``@``); a URL that does not parse is
    not printed at all.
    """
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed authority raises here, not later
    except ValueError:
        return "<unparseable URL>"
    userinfo, at, hostport = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}:***@{hostport}" if at and ":" in userinfo else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, query=_redact_query(parts.query)))


def _redact_query(query: str) -> str:
    fields = query.split("&") if query else []
    return "&".join(
        f"{name}=***" if unquote_plus(name).lower() == "password" else field
        for field in fields
        for name in (field.partition("=")[0],)
    )


def connect(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A Redis client that has answered PING, or a ConfigError saying how to fix it."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        client.ping()
    except (redis.exceptions.RedisError, ValueError, OSError) as exc:
        raise ConfigError(
            f"cannot reach Redis at {redact_url(url)} ({type(exc).__name__}: {exc}); start it "
            "(redis-server --port 6379) or set QFARM_REDIS_URL, or run with --eager"
        ) from exc
    return client


@dataclass(frozen=True)
class Progress:
    total: int
    done: int
    failed: int
    stages: dict[str, int]
    cancelled: bool


class ProducerStore:
    def __init__(self, client: redis.Redis):
        self.client = client

    # manifests ----------------------------------------------------------------
    def put_manifest(self, manifest: Manifest) -> None:
        pipe = self.client.pipeline()
        pipe.set(keys.run_key(manifest.run_id, "manifest"), manifest.model_dump_json())
        pipe.zadd(keys.RUNS_KEY, {manifest.run_id: manifest.created_at})
        pipe.execute()

    def manifest(self, run_id: str) -> Manifest | None:
        raw = self.client.get(keys.run_key(run_id, "manifest"))
        return Manifest.model_validate_json(raw) if raw else None

    def run_ids(self, limit: int = 20) -> list[str]:
        return [r.decode() for r in self.client.zrevrange(keys.RUNS_KEY, 0, limit - 1)]

    # progress -------------------------------------------------------------------
    def progress(self, run_id: str, total: int) -> Progress:
        pipe = self.client.pipeline()
        pipe.hlen(keys.run_key(run_id, "rows"))
        pipe.get(keys.run_key(run_id, "failed"))
        for stage in ("retrieve", "generate", "verify"):
            pipe.get(keys.stage_key(run_id, stage))
        pipe.exists(keys.run_key(run_id, "cancelled"))
        done, failed, r, g, v, cancelled = pipe.execute()
        return Progress(
            total=total,
            done=int(done),
            failed=int(failed or 0),
            stages={"retrieve": int(r or 0), "generate": int(g or 0), "verify": int(v or 0)},
            cancelled=bool(cancelled),
        )

    def log_length(self, run_id: str) -> int:
        return int(self.client.llen(keys.run_key(run_id, "log")))

    def read_rows(self, run_id: str, start: int, batch: int = 500) -> Iterator[bytes]:
        """Row JSON in landing order from position ``start``, fetched in batches."""
        log_key, rows_key = keys.run_key(run_id, "log"), keys.run_key(run_id, "rows")
        pos = start
        while True:
            ids = self.client.lrange(log_key, pos, pos + batch - 1)
            if not ids:
                return
            for raw in self.client.hmget(rows_key, ids):
                if raw is not None:
                    yield raw
            pos += len(ids)

    def existing_job_ids(self, run_id: str, job_ids: Iterable[str], chunk: int = 1000) -> set[str]:
        rows_key = keys.run_key(run_id, "rows")
        found: set[str] = set()
        ids = list(job_ids)
        for i in range(0, len(ids), chunk):
            part = ids[i : i + chunk]
            pipe = self.client.pipeline()
            for jid in part:
                pipe.hexists(rows_key, jid)
            found.update(j for j, ok in zip(part, pipe.execute(), strict=True) if ok)
        return found

    # cancel -----------------------------------------------------------------------
    def set_cancelled(self, run_id: str, when: float) -> None:
        self.client.set(keys.run_key(run_id, "cancelled"), f"{when:.3f}", ex=keys.ROW_TTL_S)

    def purge_run_messages(self, run_id: str, queues: Iterable[str] = keys.QUEUES) -> int:
        """Remove this run's pending messages from the queue lists; returns how many."""
        return sum(
            int(self.client.lrem(queue, 1, raw)) for queue, raw in self._queued(run_id, queues)
        )

    def pending_message_count(self, run_id: str, queues: Iterable[str] = keys.QUEUES) -> int:
        """This run's messages still in a queue or held unacknowledged by a worker.

        Scans every queue list and kombu's ``unacked`` hash, so it is only called
        when a run has stalled.
        """
        count = sum(1 for _ in self._queued(run_id, queues))
        for raw in self.client.hvals(UNACKED_KEY):
            try:
                message = json.dumps(json.loads(raw)[0]).encode()
            except (ValueError, IndexError, TypeError):
                continue
            count += _message_run_id(message) == run_id
        return count

    def _queued(self, run_id: str, queues: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        """(queue, raw message) for each of this run's messages waiting in a queue list."""
        for queue in queues:
            for raw in self.client.lrange(queue, 0, -1):
                if _message_run_id(raw) == run_id:
                    yield queue, raw

    def queue_lengths(self, queues: Iterable[str] = keys.QUEUES) -> dict[str, int]:
        pipe = self.client.pipeline()
        names = list(queues)
        for q in names:
            pipe.llen(q)
        return dict(zip(names, (int(n) for n in pipe.execute()), strict=True))


UNACKED_KEY = "unacked"  # kombu's Redis transport: delivery tag -> [message, exchange, routing key]


def _message_run_id(raw: bytes) -> str | None:
    """The run id inside a kombu/Celery message on a Redis list (JSON, base64 body)."""
    try:
        message = json.loads(raw)
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        bundle = json.loads(body)[0][0]  # the task's one argument: its bundle of jobs
        if isinstance(bundle, str):  # records between stages travel as one JSON string
            bundle = json.loads(bundle)
        first = bundle[0]
        if "run_id" in first:
            return first["run_id"]
        return first["job"]["run_id"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
