"""Worker-side Redis access: manifests, write-once rows, cancel flags, the result cache."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence

import redis

from qfarm.common import keys
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
        self, run_id: str, job_ids: Sequence[str], stage: keys.Stage
    ) -> tuple[bool, list[bool]]:
        """Count a bundle's jobs into ``stage``; returns (run cancelled, [job already has a row]).

        One round trip per bundle: this runs at every stage of every job.
        """
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(keys.cancelled_key(run_id))
        rows = keys.rows_key(run_id)
        for job_id in job_ids:
            pipe.hexists(rows, job_id)
        pipe.incrby(stage.counter_key(run_id), len(job_ids))
        cancelled, *has_row, _ = pipe.execute()
        return bool(cancelled), [bool(h) for h in has_row]

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
            failed=bool(row.error), counter_key=keys.VERIFY.counter_key(row.run_id))

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
