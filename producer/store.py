"""Producer-side Redis access: manifests, progress counters, streaming rows, cancel, purge."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from qfarm.common import keys
from qfarm.common.errors import ServiceUnreachableError
from qfarm.common.grounding.rows import row_attempt
from qfarm.common.jobs import make_job_id, manifest_from_json
from qfarm.common.models import Manifest
from qfarm.common.urls import redact_url
from qfarm.common.vocab import Role
from qfarm.producer.rundir import is_ask_run


def connect(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A Redis client that has answered PING, or a ``ServiceUnreachableError`` saying how to
    fix it (exit 1: a service is down, as for the search backend)."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        client.ping()
    except (redis.exceptions.RedisError, ValueError, OSError) as exc:
        raise ServiceUnreachableError(
            f"cannot reach Redis at {redact_url(url)} ({type(exc).__name__}: {exc}); start it "
            f"(redis-server --port {_port_of(url)}) or set QFARM_REDIS_URL, or run with --eager"
        ) from exc
    return client


def _port_of(url: str) -> int:
    """The port a Redis URL names (6379, Redis's own, when it names none)."""
    try:
        return urlsplit(url).port or 6379
    except ValueError:
        return 6379


@dataclass(frozen=True)
class LiveWorker:
    """A worker process whose heartbeat (worker/metrics.py) has not expired."""

    name: str
    node: str
    role: str
    queues: tuple[str, ...]
    gauges: dict[str, int]


@dataclass(frozen=True)
class Progress:
    total: int
    done: int
    failed: int
    stages: dict[str, int]
    cancelled: bool
    error: str | None = None  # a run-level error a worker recorded (e.g. an unreadable manifest)
    has_manifest: bool = True  # False: Redis lost the run (restarted without persistence)
    cancelled_jobs: int = 0  # jobs a cancel stopped before they had a row


@dataclass(frozen=True)
class CancelCounts:
    """A run's cancel figures, cumulative over every ``qfarm cancel`` of it."""

    cancels: int
    purged_messages: int
    cancelled_jobs: int  # jobs stopped before they had a row, by whatever part of a cancel


class ProducerStore:
    """The producer's reads and writes of a run's Redis keys.

    The client never decodes replies, so they are bytes; redis-py's stubs cannot see
    that (every reply is ``bytes | str``), hence the few ``type: ignore``s below.
    """

    def __init__(self, client: redis.Redis):
        self.client = client

    # manifests ----------------------------------------------------------------
    def put_manifest(self, manifest: Manifest, *, ttl_s: int | None = None) -> None:
        """Register a run; with ``ttl_s`` (a single question's run, which lives as long as its
        row) the manifest expires, and the index entries of questions' runs past it go."""
        pipe = self.client.pipeline()
        pipe.set(keys.manifest_key(manifest.run_id), manifest.model_dump_json(), ex=ttl_s)
        pipe.zadd(keys.RUNS_KEY, {manifest.run_id: manifest.created_at})
        pipe.execute()
        if ttl_s is not None:
            stale: list[bytes] = self.client.zrangebyscore(  # type: ignore[assignment]
                keys.RUNS_KEY, "-inf", manifest.created_at - ttl_s)
            gone = [r for r in stale if is_ask_run(r.decode())]
            if gone:
                self.client.zrem(keys.RUNS_KEY, *gone)

    def manifest(self, run_id: str) -> Manifest | None:
        """The run's manifest, None if Redis has none, a ManifestError if it is unreadable."""
        raw = self.client.get(keys.manifest_key(run_id))
        return manifest_from_json(run_id, raw) if raw else None

    def has_manifest(self, run_id: str) -> bool:
        return bool(self.client.exists(keys.manifest_key(run_id)))

    def manifest_run_ids(self, batch: int = 500) -> list[str]:
        """Every run that has a manifest in Redis, found by SCAN (never KEYS: it blocks
        the server), so runs written by another host's producer are found too."""
        found: list[str] = []
        for key in self.client.scan_iter(match=keys.run_pattern("manifest"), count=batch):
            run_id = keys.run_id_of(key.decode(errors="replace"), "manifest")  # type: ignore[union-attr]
            if run_id is not None:
                found.append(run_id)
        return sorted(set(found))

    def run_ids(self, limit: int = 20) -> list[str]:
        runs: list[bytes] = self.client.zrevrange(keys.RUNS_KEY, 0, limit - 1)  # type: ignore[assignment]
        return [r.decode() for r in runs]

    # progress -------------------------------------------------------------------
    def progress(self, run_id: str, total: int) -> Progress:
        pipe = self.client.pipeline()
        pipe.hlen(keys.rows_key(run_id))
        pipe.get(keys.failed_key(run_id))
        for stage in keys.SWEEP_STAGES:
            pipe.get(stage.counter_key(run_id))
        pipe.exists(keys.cancelled_key(run_id))
        pipe.get(keys.error_key(run_id))
        pipe.exists(keys.manifest_key(run_id))
        pipe.scard(keys.cancelled_jobs_key(run_id))
        done, failed, *entered, cancelled, error, has_manifest, cancelled_jobs = pipe.execute()
        return Progress(
            total=total,
            done=int(done),
            failed=int(failed or 0),
            stages={s.name: int(n or 0) for s, n in zip(keys.SWEEP_STAGES, entered, strict=True)},
            cancelled=bool(cancelled),
            error=error.decode(errors="replace") if error else None,
            has_manifest=bool(has_manifest),
            cancelled_jobs=int(cancelled_jobs or 0),
        )

    def log_length(self, run_id: str) -> int:
        return int(self.client.llen(keys.log_key(run_id)))

    def log_head(self, run_id: str) -> tuple[int, bytes | None]:
        """(length of the run's row log, its first job id): a changed first id means
        the log was lost and rebuilt (a Redis restart without persistence)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.llen(keys.log_key(run_id))
        pipe.lindex(keys.log_key(run_id), 0)
        length, first = pipe.execute()
        return int(length), first

    def read_rows(self, run_id: str, start: int, batch: int = 500) -> Iterator[bytes]:
        """Row JSON in landing order from position ``start``, fetched in batches."""
        for ids, _ in self.read_log(run_id, start, batch):
            yield from (raw for raw in self.rows_for(run_id, ids) if raw is not None)

    def read_log(self, run_id: str, start: int, batch: int = 2000) -> Iterator[tuple[list[str], int]]:
        """(job ids, how many log entries they are) in landing order from ``start``, in batches."""
        log_key = keys.log_key(run_id)
        pos = start
        while ids := self.client.lrange(log_key, pos, pos + batch - 1):
            yield [i.decode() for i in ids], len(ids)  # type: ignore[union-attr]
            pos += len(ids)

    def log_ids_at(self, run_id: str, positions: Sequence[int]) -> list[str | None]:
        """The job id at each of ``positions`` of the run's row log (None past its end), in
        one round trip: the viewer's index keeps log positions, not job ids."""
        if not positions:
            return []
        log_key = keys.log_key(run_id)
        lo, hi = min(positions), max(positions)
        if hi - lo < 4 * len(positions):  # close together (landing order): one LRANGE
            span: list[bytes] = self.client.lrange(log_key, lo, hi)  # type: ignore[assignment]
            return [span[p - lo].decode() if p - lo < len(span) else None for p in positions]
        pipe = self.client.pipeline(transaction=False)
        for pos in positions:
            pipe.lindex(log_key, pos)
        return [i.decode() if i is not None else None for i in pipe.execute()]

    def rows_for(self, run_id: str, job_ids: list[str]) -> list[bytes | None]:
        if not job_ids:
            return []
        return self.client.hmget(keys.rows_key(run_id), job_ids)  # type: ignore[return-value]

    def forget_rows(self, run_id: str, job_ids: list[str]) -> None:
        """Empty the stored rows of ``job_ids``, keeping their ids (progress counts them and
        the write-once script still refuses a second row): an eager run's private store
        drops each row once it is in rows.jsonl, so a million-row run does not hold them."""
        if job_ids:
            self.client.hset(keys.rows_key(run_id), mapping=dict.fromkeys(job_ids, b""))

    def restore_rows(self, run_id: str, rows: Iterable[tuple[str, bytes]], chunk: int = 500) -> int:
        """Write (job id, row JSON) pairs that Redis lacks, set-if-absent as workers do
        (rows hash, log, failure count); returns how many were missing."""
        script = self.client.register_script(keys.WRITE_ROW_LUA)
        rows_key = keys.rows_key(run_id)
        restored = 0
        part: list[tuple[str, bytes]] = []

        def flush() -> int:
            have = self.client.pipeline(transaction=False)
            for job_id, _ in part:
                have.hexists(rows_key, job_id)
            parsed = [(j, raw, json.loads(raw)) for j, raw in part]
            # A retry's row (attempt > 0) may still replace the error row Redis holds.
            todo = [(j, raw, row) for (j, raw, row), ok in zip(parsed, have.execute(), strict=True)
                    if not ok or row_attempt(row) > 0]
            pipe = self.client.pipeline(transaction=False)
            for job_id, raw, row in todo:
                script(**keys.write_row_call(run_id, job_id, raw.rstrip(b"\n"),
                                             failed=bool(row.get("error")),
                                             counter_key=keys.restored_key(run_id),
                                             attempt=row_attempt(row)), client=pipe)
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
        rows_key = keys.rows_key(run_id)
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
        """Raise the run's cancel flag; a later cancel keeps the first one's time."""
        self.client.set(keys.cancelled_key(run_id), f"{when:.3f}", nx=True, ex=keys.ROW_TTL_S)

    def purge_run_messages(self, run_id: str, queues: Iterable[str] = keys.QUEUES) -> int:
        """Remove this run's pending messages from the queue lists; returns how many.

        The jobs they carried (and had no row) join the run's cancelled jobs, and the
        count adds to the run's cumulative ``purged_messages``.
        """
        removed = 0
        job_ids: list[str] = []
        for queue, raw in self._queued(run_id, queues):
            if int(self.client.lrem(queue, 1, raw)):  # type: ignore[arg-type]
                removed += 1
                job_ids += message_job_ids(raw)
        rows = keys.rows_key(run_id)
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hexists(rows, job_id)
        has_row = pipe.execute() if job_ids else []
        stopped = [j for j, done in zip(job_ids, has_row, strict=True) if not done]
        pipe = self.client.pipeline(transaction=False)
        if stopped:
            pipe.sadd(keys.cancelled_jobs_key(run_id), *stopped)
            pipe.expire(keys.cancelled_jobs_key(run_id), keys.ROW_TTL_S)
        pipe.hincrby(keys.cancels_key(run_id), "purged_messages", removed)
        pipe.expire(keys.cancels_key(run_id), keys.ROW_TTL_S)
        pipe.execute()
        return removed

    def count_cancel(self, run_id: str) -> CancelCounts:
        """One more cancel of the run; the counts so far, cumulative over every cancel."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(keys.cancels_key(run_id), "cancels", 1)
        pipe.expire(keys.cancels_key(run_id), keys.ROW_TTL_S)
        pipe.execute()
        return self.cancel_counts(run_id)

    def cancel_counts(self, run_id: str) -> CancelCounts:
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(keys.cancels_key(run_id))
        pipe.scard(keys.cancelled_jobs_key(run_id))
        counts, jobs = pipe.execute()
        return CancelCounts(
            cancels=int(counts.get(b"cancels", 0)),
            purged_messages=int(counts.get(b"purged_messages", 0)),
            cancelled_jobs=int(jobs or 0),
        )

    def pending_message_count(self, run_id: str, queues: Iterable[str] = keys.QUEUES) -> int:
        """This run's messages still in a queue or held unacknowledged by a worker.

        Scans every queue list and kombu's ``unacked`` hash, so it is only called
        when a run has stalled.
        """
        count = sum(1 for _ in self._queued(run_id, queues))
        for raw in self.client.hvals(keys.UNACKED_KEY):
            try:
                message = json.loads(raw)[0]
            except (ValueError, IndexError, TypeError, KeyError):
                continue
            count += message_run_id(message) == run_id
        return count

    def _queued(self, run_id: str, queues: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        """(queue, raw message) for each of this run's messages waiting in a queue list."""
        for queue in queues:
            raws: list[bytes] = self.client.lrange(queue, 0, -1)  # type: ignore[assignment]
            for raw in raws:
                if message_run_id(raw) == run_id:
                    yield queue, raw

    # operator metrics -------------------------------------------------------------
    def count_enqueued(self, per_mode: Mapping[str, int]) -> None:
        from qfarm.common import metrics

        pipe = self.client.pipeline(transaction=False)
        for mode, n in per_mode.items():
            if n:
                pipe.hincrby(keys.METRICS_COUNTERS_KEY, metrics.field(metrics.ENQUEUED, mode), n)
        pipe.execute()

    def metric_counters(self) -> dict[str, int]:
        raw: dict[bytes, bytes] = self.client.hgetall(keys.METRICS_COUNTERS_KEY)  # type: ignore[assignment]
        return {k.decode(errors="replace"): int(v) for k, v in raw.items()}

    def live_workers(self, max_age_s: float = 60.0) -> list[LiveWorker]:
        """Worker processes with a live heartbeat; forgets names silent for ``max_age_s``."""
        now = time.time()
        self.client.zremrangebyscore(keys.WORKERS_KEY, "-inf", now - max_age_s)
        names: list[bytes] = self.client.zrange(keys.WORKERS_KEY, 0, -1)  # type: ignore[assignment]
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(keys.worker_key(name.decode()))
        out = []
        for name, fields in zip(names, pipe.execute(), strict=True):
            if not fields:
                continue  # expired: three flushes missed
            data = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
            gauges = {k: int(v) for k, v in data.items() if k not in ("role", "node", "queues")}
            out.append(LiveWorker(name=name.decode(), node=data.get("node", ""),
                                  role=data.get("role", Role.MIXED),
                                  queues=tuple(q for q in data.get("queues", "").split(",") if q),
                                  gauges=gauges))
        return out

    def queue_lengths(self, queues: Iterable[str] = keys.QUEUES) -> dict[str, int]:
        pipe = self.client.pipeline()
        names = list(queues)
        for q in names:
            pipe.llen(q)
        return dict(zip(names, (int(n) for n in pipe.execute()), strict=True))


def task_args(message: bytes | dict) -> list:
    """The positional arguments of the Celery task in a kombu message as kombu's Redis
    transport stores it (a queue list entry, or the first item of an ``unacked`` entry).

    The envelope is JSON whose ``body`` is Celery's protocol-2 triple ``[args, kwargs,
    embed]``, base64-encoded when ``properties.body_encoding`` says so. Raises
    ValueError, KeyError, IndexError or TypeError on anything else.
    """
    envelope = json.loads(message) if isinstance(message, bytes | str) else message
    body = envelope["body"]
    if envelope.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args = json.loads(body)[0]
    if not isinstance(args, list):
        raise TypeError(f"task args are a {type(args).__name__}, not a list")
    return args


def message_job_ids(message: bytes | dict) -> list[str]:
    """The job ids a qfarm message carries ([] for any other message)."""
    try:
        bundle = task_args(message)[0]
        if isinstance(bundle, str):
            records = json.loads(bundle)
            records = records["records"] if isinstance(records, dict) else records
            return [str(r["job"]["job_id"]) for r in records]
        return [make_job_id(ref["qid"], ref["mode"], int(ref.get("i", 0))) for ref in bundle]
    except (ValueError, KeyError, IndexError, TypeError):
        return []


def message_run_id(message: bytes | dict) -> str | None:
    """The run a qfarm message belongs to, None for any other message.

    The task's one argument is its bundle: job refs (a list of dicts with ``run_id``)
    for the first stage, or the records of a later stage as one JSON string.
    """
    try:
        bundle = task_args(message)[0]
        if isinstance(bundle, str):  # worker/encoding.py dump_records: an object
            return json.loads(bundle)["records"][0]["job"]["run_id"]
        return bundle[0]["run_id"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
