"""Worker-side Redis access: manifests, write-once rows, cancel flags, the result cache
(``InProcessStore``: the same for an eager run's in-memory Redis, without the row script)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence

import redis

from qfarm.common import keys
from qfarm.common.grounding.rows import is_replaceable
from qfarm.common.jobs import manifest_from_json
from qfarm.common.models import JobRecord, Manifest, Row


class WorkerStore:
    """Thin wrapper over one Redis client (thread-safe: redis-py pools connections)."""

    def __init__(self, client: redis.Redis, *, manifest_cache_size: int = 64):
        self.client = client
        self._write_row = client.register_script(keys.WRITE_ROW_LUA)
        self._manifests: OrderedDict[str, Manifest] = OrderedDict()
        self._cache_size = manifest_cache_size

    def manifest(self, run_id: str) -> Manifest | None:
        cached = self._manifests.get(run_id)
        if cached is not None:
            self._manifests.move_to_end(run_id)
            return cached
        raw = self.client.get(keys.manifest_key(run_id))
        if raw is None:
            return None
        manifest = manifest_from_json(run_id, raw)
        self._manifests[run_id] = manifest
        while len(self._manifests) > self._cache_size:
            self._manifests.popitem(last=False)
        return manifest

    def set_run_error(self, run_id: str, message: str) -> None:
        """Record an error of the whole run (the first one stays); followers stop on it."""
        self.client.set(keys.error_key(run_id), message, nx=True, ex=keys.ROW_TTL_S)

    def enter_stage(
        self, run_id: str, job_ids: Sequence[str], stage: keys.Stage,
        attempts: Sequence[int] | None = None,
    ) -> tuple[bool, list[bool]]:
        """Count a bundle's jobs into ``stage``; returns (run cancelled, [job already has a row]).

        A retried job (``attempts`` > 0) counts as done only when its row is not an error
        row of an earlier attempt (``is_replaceable``). One round trip per bundle: this runs
        at every stage of every job.
        """
        tries = list(attempts) if attempts is not None else [0] * len(job_ids)
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(keys.cancelled_key(run_id))
        rows = keys.rows_key(run_id)
        for job_id, attempt in zip(job_ids, tries, strict=True):
            if attempt > 0:
                pipe.hget(rows, job_id)
            else:
                pipe.hexists(rows, job_id)
        pipe.incrby(stage.counter_key(run_id), len(job_ids))
        cancelled, *has_row, _ = pipe.execute()
        done = [
            not is_replaceable(found, attempt) if attempt > 0 and found else bool(found)
            for found, attempt in zip(has_row, tries, strict=True)
        ]
        return bool(cancelled), done

    def cancelled_runs(self, run_ids: Sequence[str]) -> set[str]:
        """Which of these runs are cancelled (one round trip)."""
        ids = list(dict.fromkeys(run_ids))
        pipe = self.client.pipeline(transaction=False)
        for run_id in ids:
            pipe.exists(keys.cancelled_key(run_id))
        return {run_id for run_id, flag in zip(ids, pipe.execute(), strict=True) if flag}

    def add_cancelled_jobs(self, run_id: str, job_ids: Sequence[str]) -> None:
        """Count jobs a cancel stopped before they had a row (a set: a redelivered message
        skipped twice counts its jobs once)."""
        if not job_ids:
            return
        key = keys.cancelled_jobs_key(run_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.sadd(key, *job_ids)
        pipe.expire(key, keys.ROW_TTL_S)
        pipe.execute()

    def write_row(self, row: Row, *, pipeline: redis.client.Pipeline | None = None,
                  row_json: str | None = None) -> bool:  # fmt: skip
        """Write the row unless one exists for this job; True if this call wrote it.

        ``row_json`` is the row already serialised (the worker checks that each row can be,
        worker/flow.py). With ``pipeline`` the write is only queued (bulk loaders); the
        result is then False.
        """
        args = self._row_script_args(row, row_json)
        wrote = self._write_row(**args, client=pipeline)
        return pipeline is None and bool(wrote)

    def write_rows(self, rows: Sequence[Row], row_jsons: Sequence[str] | None = None) -> list[bool]:
        """``write_row`` for a bundle in one pipeline; [True where this call wrote the row].

        One round trip: the pipeline sends ``EVALSHA`` itself rather than registering the
        script with redis-py, which would ask ``SCRIPT EXISTS`` first on every execute.
        Should the server not know the script (a restarted Redis), those rows are written
        again one by one through the registered script, which loads it; the script is
        set-if-absent, so a row can never be written twice.
        """
        jsons = list(row_jsons) if row_jsons is not None else [r.model_dump_json() for r in rows]
        if len(rows) <= 1:
            return [self.write_row(r, row_json=j) for r, j in zip(rows, jsons, strict=True)]
        pipe = self.client.pipeline(transaction=False)
        for row, row_json in zip(rows, jsons, strict=True):
            args = self._row_script_args(row, row_json)
            pipe.evalsha(self._write_row.sha, len(args["keys"]), *args["keys"], *args["args"])
        results = pipe.execute(raise_on_error=False)
        wrote = []
        for row, row_json, result in zip(rows, jsons, results, strict=True):
            if isinstance(result, redis.exceptions.NoScriptError):
                wrote.append(self.write_row(row, row_json=row_json))
            elif isinstance(result, Exception):
                raise result
            else:
                wrote.append(bool(result))
        return wrote

    @staticmethod
    def _row_script_args(row: Row, row_json: str | None = None) -> dict[str, list]:
        return keys.write_row_call(
            row.run_id, row.job_id, row.model_dump_json() if row_json is None else row_json,
            failed=bool(row.error), counter_key=keys.VERIFY.counter_key(row.run_id),
            attempt=len(row.retried_errors))

    def get_cached_many(self, digests: Sequence[str]) -> list[dict | None]:
        if not digests:
            return []
        raws = self.client.mget([keys.cache_key(d) for d in digests])
        return [json.loads(raw) if raw else None for raw in raws]

    def put_cached_many(self, entries: Sequence[tuple[str, Row | str]]) -> None:
        """Cache rows by digest; a row may come already serialised (its JSON string)."""
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        for digest, row in entries:
            raw = row if isinstance(row, str) else row.model_dump_json()
            pipe.set(keys.cache_key(digest), raw, ex=keys.CACHE_TTL_S)
        pipe.execute()

    def put_detail(self, record: JobRecord, ttl_s: int = 24 * 3600) -> None:
        key = keys.detail_key(record.job.run_id, record.job.job_id)
        self.client.set(key, record.model_dump_json(), ex=ttl_s)


class InProcessStore(WorkerStore):
    """The store of an eager run: an in-memory Redis that only this process reaches.

    Rows are still written once per job, but by a lock and two pipelines instead of the
    row script: fakeredis runs a Lua script in an interpreter of its own, which cost a
    seventh of an eager sweep's CPU (one call per job). The guarantee is the script's
    (a row per job id, its id logged once, failures counted once) because every writer
    of this server is in this process and goes through ``_writes``; a Redis that other
    processes share must use ``WorkerStore``.
    """

    def __init__(self, client: redis.Redis, *, manifest_cache_size: int = 64):
        super().__init__(client, manifest_cache_size=manifest_cache_size)
        self._writes = threading.Lock()

    def write_row(self, row: Row, *, pipeline: redis.client.Pipeline | None = None,
                  row_json: str | None = None) -> bool:  # fmt: skip
        if pipeline is not None:  # a bulk loader's pipeline: the script, as WorkerStore queues it
            return super().write_row(row, pipeline=pipeline, row_json=row_json)
        return self.write_rows([row], None if row_json is None else [row_json])[0]

    def write_rows(self, rows: Sequence[Row], row_jsons: Sequence[str] | None = None) -> list[bool]:
        jsons = list(row_jsons) if row_jsons is not None else [r.model_dump_json() for r in rows]
        if not rows:
            return []
        by_run: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            by_run.setdefault(row.run_id, []).append(i)
        wrote = [False] * len(rows)
        with self._writes:
            for run_id, members in by_run.items():
                rows_key = keys.rows_key(run_id)
                pipe = self.client.pipeline(transaction=False)
                pipe.incrby(keys.VERIFY.counter_key(run_id), len(members))
                pipe.hmget(rows_key, [rows[i].job_id for i in members])
                _, found = pipe.execute()
                # Set-if-absent for the batch at once (an HSETNX a row cost fakeredis five
                # times a bundle's HMGET): the lock keeps any other writer out in between,
                # and a job twice in one batch keeps its first row, as HSETNX would.
                new = []
                absent = {rows[i].job_id for i, row in zip(members, found, strict=True)
                          if row is None}  # fmt: skip
                for i in members:
                    if rows[i].job_id in absent:
                        absent.discard(rows[i].job_id)
                        new.append(i)
                if not new:
                    continue
                pipe = self.client.pipeline(transaction=False)
                pipe.hset(rows_key, mapping={rows[i].job_id: jsons[i] for i in new})
                pipe.rpush(keys.log_key(run_id), *[rows[i].job_id for i in new])
                failed = sum(1 for i in new if rows[i].error)
                if failed:
                    pipe.incrby(keys.failed_key(run_id), failed)
                pipe.expire(rows_key, keys.ROW_TTL_S)
                pipe.expire(keys.log_key(run_id), keys.ROW_TTL_S)
                pipe.execute()
                for i in new:
                    wrote[i] = True
        return wrote
