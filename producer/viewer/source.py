"""Runs as the viewer reads them: from their directory when they have one, else from
Redis (a run in progress whose follower has written nothing yet, or one followed on
another host). Redis is optional (``qfarm.producer.viewer.live``)."""

from __future__ import annotations

import threading
from pathlib import Path

from qfarm.common.errors import InputError, ManifestError
from qfarm.common.models import Manifest
from qfarm.common.runstatus import StatusRecord, run_state
from qfarm.common.vocab import LIVE_RUN_STATUSES, RunStatus
from qfarm.producer.reports.rows import MANIFEST
from qfarm.producer.reports.summary import shown_status
from qfarm.producer.rundir import is_run_id, read_manifest, read_status
from qfarm.producer.store import ProducerStore, Progress
from qfarm.producer.viewer.gold import GoldFiles
from qfarm.producer.viewer.html import NotFound
from qfarm.producer.viewer.index import RowsCache, RunRows
from qfarm.producer.viewer.live import RedisSource
from qfarm.producer.viewer.reread import PassageSource
from qfarm.worker.broker import REDIS_DOWN

LIVE_STATES = LIVE_RUN_STATUSES


def redis_status(p: Progress) -> str:
    """A Redis-only run's state, in the words of ``status.json``."""
    if not p.has_manifest:
        return RunStatus.LOST
    return run_state(None, done=p.done, total=p.total, cancelled=p.cancelled, error=p.error)


def finished_at(state: str, status: StatusRecord, last_row_at: float | None) -> float | None:
    """When the run ended; a live run has not (its last row's time is not its end)."""
    if state in LIVE_STATES:
        return None
    return status.finished_at or last_row_at


class RunSource:
    """Where the viewer reads runs: one results directory and, optionally, Redis.

    ``store`` is a Redis store the caller already has (``qfarm serve``), ``redis_url``
    one to connect to lazily (``qfarm view``); with neither, Redis is not read.
    ``index_path`` is the embedded index the row page reads passages from, or
    ``passages`` a source of them (tests).
    """

    def __init__(
        self,
        results_dir: Path,
        store: ProducerStore | None = None,
        *,
        redis_url: str | None = None,
        index_path: Path | None = None,
        passages: PassageSource | None = None,
    ) -> None:
        self.results_dir = Path(results_dir)
        self.cache = RowsCache()
        self.gold = GoldFiles()
        self.redis = RedisSource(store, redis_url)
        self.index_path = index_path
        self._passages = passages
        self._passages_lock = threading.Lock()

    def has_dir(self, run_id: str) -> bool:
        return is_run_id(run_id) and (self.results_dir / run_id / MANIFEST).is_file()

    def run_dir(self, run_id: str) -> Path:
        if not self.has_dir(run_id):
            raise NotFound(f"no run {run_id!r} in {self.results_dir}")
        return self.results_dir / run_id

    def redis_run_ids(self) -> list[str]:
        """Runs with a manifest in Redis and no directory here, newest id first."""
        store = self.redis.get()
        if store is None:
            return []
        try:
            ids = store.manifest_run_ids()
        except REDIS_DOWN as exc:
            self.redis.failed(exc)
            return []
        self.redis.ok()
        return sorted((r for r in ids if is_run_id(r) and not self.has_dir(r)), reverse=True)

    def run_ids(self) -> list[str]:
        if not self.results_dir.is_dir():
            return []
        dirs = [p for p in self.results_dir.iterdir() if (p / MANIFEST).is_file()]
        return [p.name for p in sorted(dirs, key=lambda p: p.name, reverse=True)]

    def run(self, run_id: str) -> tuple[Manifest, StatusRecord, RunRows]:
        """A run's manifest, status and rows: from its directory, else from Redis."""
        if self.has_dir(run_id):
            run_dir = self.results_dir / run_id
            on_disk, status = read_manifest(run_dir), read_status(run_dir)
            rr = self.cache.get(run_dir)
            # The status its rows and its process say, not status.json's word.
            return on_disk, status.shown_as(shown_status(on_disk, status, rr.stats.jobs)), rr
        store = self.redis.get() if is_run_id(run_id) else None
        if store is None:
            where = " or in Redis" if self.redis.configured else ""
            raise NotFound(f"no run {run_id!r} in {self.results_dir}{where}"
                           + (f" ({self.redis.note})" if self.redis.note else ""))
        try:
            manifest = store.manifest(run_id)
            if manifest is None:
                raise NotFound(f"no run {run_id!r} in {self.results_dir} or in Redis")
            progress = store.progress(run_id, manifest.n_jobs)
            rr = self.cache.get_redis(store, run_id)
        except REDIS_DOWN as exc:
            self.redis.failed(exc)
            raise NotFound(f"run {run_id!r} has no directory here and {self.redis.note}") from None
        except ManifestError as exc:
            raise InputError(str(exc)) from None
        self.redis.ok()
        status = StatusRecord(status=redis_status(progress), started_at=manifest.created_at,
                              rows=progress.done, source="redis")
        return manifest, status, rr

    def manifest(self, run_id: str) -> Manifest | None:
        """A run's manifest alone (no rows read), or None when it cannot be read."""
        if self.has_dir(run_id):
            try:
                return read_manifest(self.results_dir / run_id)
            except (InputError, ManifestError):
                return None
        store = self.redis.get() if is_run_id(run_id) else None
        if store is None:
            return None
        try:
            return store.manifest(run_id)
        except REDIS_DOWN as exc:
            self.redis.failed(exc)
        except ManifestError:
            pass
        return None

    def proposed_pair(self, sweeps: list[str]) -> tuple[str, str]:
        """The two most recent sweeps over the same question file (same digest, else same
        path), older first; ("", "") when no two share one."""
        made = [(m.created_at, r, m) for r in sweeps if (m := self.manifest(r)) is not None]
        made.sort(key=lambda t: t[0], reverse=True)
        for i, (_, newer, mn) in enumerate(made):
            for _, older, mo in made[i + 1:]:
                if (mo.question_file_digest == mn.question_file_digest
                        or mo.question_file == mn.question_file):
                    return older, newer
        return "", ""

    def passages(self) -> PassageSource | None:
        """The embedded index, opened read-only on first use; None when there is none."""
        with self._passages_lock:
            if self._passages is None and self.index_path is not None:
                from qfarm.worker.retrieval.embedded import EmbeddedRetriever, read_meta

                if read_meta(self.index_path) is not None:
                    self._passages = EmbeddedRetriever(self.index_path)
            return self._passages
