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
from common.jobs import manifest_from_json
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
    error: str | None = None  # a run-level error a worker recorded (e.g. an unreadable manifest)
    has_manifest: bool = True  # False: Redis lost the run (restarted without persistence)


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
        """The run's manifest, None if Redis has none, a ManifestError if it is unreadable."""
        raw = self.client.get(keys.run_key(run_id, "manifest"))
        return manifest_from_json(run_id, raw) if raw else None

    def has_manifest(self, run_id: str) -> bool:
        return bool(self.client.exists(keys.run_key(run_id, "manifest")))

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
        pipe.get(keys.run_key(run_id, "error"))
        pipe.exists(keys.run_key(run_id, "manifest"))
        done, failed, r, g, v, cancelled, error, has_manifest = pipe.execute()
        return Progress(
            total=total,
            done=int(done),
            failed=int(failed or 0),
            stages={"retrieve": int(r or 0), "generate": int(g or 0), "verify": int(v or 0)},
            cancelled=bool(cancelled),
            error=error.decode(errors="replace") if error else None,
            has_manifest=bool(has_manifest),
        )

    def log_length(self, run_id: str) -> int:
        return int(self.client.llen(keys.run_key(run_id, "log")))

    def log_head(self, run_id: str) -> tuple[int, bytes | None]:
        """(length of the run's row log, its first job id): a changed first id means
        the log was lost and rebuilt (a Redis restart without persistence)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.llen(keys.run_key(run_id, "log"))
        pipe.lindex(keys.run_key(run_id, "log"), 0)
        length, first = pipe.execute()
        return int(length), first

    def read_rows(self, run_id: str, start: int, batch: int = 500) -> Iterator[bytes]:
        """Row JSON in landing order from position ``start``, fetched in batches."""
        for ids, _ in self.read_log(run_id, start, batch):
            yield from (raw for raw in self.rows_for(run_id, ids) if raw is not None)

    def read_log(self, run_id: str, start: int, batch: int = 2000) -> Iterator[tuple[list[str], int]]:
        """(job ids, how many log entries they are) in landing order from ``start``, in batches."""
        log_key = keys.run_key(run_id, "log")
        pos = start
        while ids := self.client.lrange(log_key, pos, pos + batch - 1):
            yield [i.decode() for i in ids], len(ids)
            pos += len(ids)

    def rows_for(self, run_id: str, job_ids: list[str]) -> list[bytes | None]:
        return self.client.hmget(keys.run_key(run_id, "rows"), job_ids) if job_ids else []

    def restore_rows(self, run_id: str, rows: Iterable[tuple[str, bytes]], chunk: int = 500) -> int:
        """Write (job id, row JSON) pairs that Redis lacks, set-if-absent as workers do
        (rows hash, log, failure count); returns how many were missing."""
        script = self.client.register_script(keys.WRITE_ROW_LUA)
        rows_key = keys.run_key(run_id, "rows")
        row_keys = [rows_key, keys.run_key(run_id, "log"), keys.run_key(run_id, "failed"),
                    keys.run_key(run_id, "restored")]
        restored = 0
        part: list[tuple[str, bytes]] = []

        def flush() -> int:
            have = self.client.pipeline(transaction=False)
            for job_id, _ in part:
                have.hexists(rows_key, job_id)
            todo = [(j, raw) for (j, raw), ok in zip(part, have.execute(), strict=True) if not ok]
            pipe = self.client.pipeline(transaction=False)
            for job_id, raw in todo:
                failed = bool(json.loads(raw).get("error"))
                script(keys=row_keys, args=[job_id, raw.rstrip(b"\n"), "1" if failed else "0",
                                            keys.ROW_TTL_S], client=pipe)
            return sum(bool(w) for w in pipe.execute()) if todo else 0

        for item in rows:
            part.append(item)
            if len(part) >= chunk:
                restored += flush()
                part = []
        if part:
            restored += flush()
        return restored

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
