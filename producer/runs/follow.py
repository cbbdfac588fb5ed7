"""Following a distributed run until every job has a row, again after a restart
(``qfarm sweep --attach`` / ``--resume``), and writing how a run ended."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.runstatus import RetryEntry, RowsRecovered
from qfarm.common.settings import Settings, load_settings
from qfarm.common.vocab import RunStatus
from qfarm.producer import interrupts
from qfarm.producer.reports.summary import warm_plotting
from qfarm.producer.rundir import (
    is_disk_full,
    read_manifest,
    read_status,
    stopped_by_full_disk,
    write_status,
)
from qfarm.producer.runs.aggregator import Aggregator
from qfarm.producer.runs.consumers import SHARED_ANSWER_S, unconsumed_queues, worker_commands
from qfarm.producer.runs.lease import FollowerLease
from qfarm.producer.runs.services import (
    celery_app,
    enqueue_counted,
    require_endpoints_for_workers,
    say_to_log,
)
from qfarm.producer.runs.sweep import (
    Follower,
    NoWorkers,
    RedisGone,
    SweepPlan,
    missing_jobs,
    reconcile_run,
    run_questions,
)
from qfarm.producer.runs.types import OnProgress, RunResult, Say
from qfarm.producer.store import ProducerStore, connect


def follow_run(
    run_id: str,
    *,
    resend_missing: bool = False,
    settings: Settings | None = None,
    on_progress: OnProgress | None = None,
    say: Say | None = None,
) -> RunResult:
    """Follow a distributed run again (``qfarm sweep --attach``); with ``resend_missing``
    (``--resume``) first put back rows Redis lost and re-send the jobs without a row."""
    settings = settings or load_settings()
    say = say or say_to_log
    run_dir = settings.results_dir / run_id
    if not (run_dir / "manifest.json").exists():
        raise InputError(f"run {run_id}: no {run_dir}/manifest.json; pass --out with the results dir")
    manifest = read_manifest(run_dir)
    if manifest.eager:
        raise InputError(f"run {run_id} was an eager run: resume it in this process with "
                         f"qfarm sweep --resume {run_id} --eager")
    store = ProducerStore(connect(settings.redis_url))
    if not store.has_manifest(run_id):
        store.put_manifest(manifest)  # Redis lost it (restart): restore before re-enqueueing
    app = celery_app(settings)
    plan = None
    try:
        plan = SweepPlan(manifest=manifest,
                         questions=run_questions(manifest, settings.max_question_chars))
    except InputError:
        if resend_missing:
            raise
        say(f"warning: {manifest.question_file} is gone or changed; following run {run_id} "
            "without re-sending lost jobs")
    lease = FollowerLease(store.client, run_id)
    recovered = None
    if resend_missing:
        assert plan is not None  # a missing question file raised above
        require_endpoints_for_workers(settings)
        recovered = _recover(store, run_dir, manifest, lease, say)
        record_resume(run_dir)  # after _recover: the rows only Redis had are in the file now
        sent = enqueue_counted(app, store, missing_jobs(plan, store), bundle_size=settings.bundle_size)
        say(f"run {run_id}: re-enqueued {sent} jobs without a row")
    reconcile = reconciler(app, plan, store, settings.bundle_size, say) if plan else None
    return follow_to_end(store, run_dir, manifest, settings, on_progress, say, reconcile=reconcile,
                   recovered=recovered, lease=lease)


def _recover(store: ProducerStore, run_dir: Path, manifest: Manifest, lease: FollowerLease,
             say: Say) -> RowsRecovered:
    """Before re-sending jobs: rows only in rows.jsonl go back to Redis (it lost them in a
    restart), rows only in Redis go into rows.jsonl (if no other follower drains the run)."""
    agg = Aggregator(store, manifest.run_id, run_dir / "rows.jsonl")
    from_file = agg.restore_to_redis()
    from_redis = agg.drain() if lease.hold() else 0
    say(f"run {manifest.run_id}: recovered {from_file} rows from rows.jsonl and "
        f"{from_redis} from Redis")
    return RowsRecovered(rows_recovered_from_file=from_file, rows_recovered_from_redis=from_redis)


def reconciler(app: Any, plan: SweepPlan, store: ProducerStore, bundle_size: int,
                say: Say) -> Callable[[], int]:
    def reconcile() -> int:
        sent = reconcile_run(app, plan, store, bundle_size=bundle_size)
        if sent:
            say(f"\nrun {plan.manifest.run_id}: {sent} jobs had no row and no message left "
                "(lost with a killed worker or a Redis restart); re-enqueued them")
        return sent

    return reconcile


def worker_watch(store: ProducerStore, settings: Settings) -> dict[str, Any]:
    """The ``Follower`` arguments that watch the sweep queues for a worker: which have none
    (``consumers.unconsumed_queues``), how long to wait for one, how to start one."""
    app = celery_app(settings)
    sweep_queues = [stage.queue for stage in keys.SWEEP_STAGES]
    return {"unconsumed": lambda: unconsumed_queues(app, store, sweep_queues,
                                                    reuse_s=SHARED_ANSWER_S),
            "wait_for_workers_s": settings.wait_for_workers_s,
            "worker_hint": lambda queues: " and ".join(worker_commands(queues))}


def follow_to_end(store: ProducerStore, run_dir: Path, manifest: Manifest, settings: Settings,
            on_progress: OnProgress | None, say: Say, *, reconcile: Callable[[], int] | None,
            recovered: RowsRecovered | None = None,
            lease: FollowerLease | None = None) -> RunResult:
    warm_plotting()
    run_id = manifest.run_id
    follower = Follower(store, manifest, run_dir / "rows.jsonl",
                        lease=lease or FollowerLease(store.client, run_id), reconcile=reconcile,
                        say=say, reconnect_s=settings.redis_reconnect_s,
                        **worker_watch(store, settings))
    try:
        prog = follower.run(on_progress=on_progress)
    except KeyboardInterrupt:
        interrupts.handled()
        follower.release()
        return RunResult(manifest, run_dir, RunStatus.INTERRUPTED, _written(follower))
    except RedisGone as exc:
        write_status(run_dir, read_status(run_dir).detached())
        return RunResult(manifest, run_dir, RunStatus.DETACHED, _written(follower), error=str(exc))
    except NoWorkers as exc:
        # The jobs stay queued: a worker started later runs them, and --attach drains their rows.
        follower.release()
        write_status(run_dir, read_status(run_dir).no_worker(exc.queues, rows=_written(follower)))
        return RunResult(manifest, run_dir, RunStatus.NO_WORKER, _written(follower),
                         error=f"{exc}; start workers with: {' and '.join(worker_commands(exc.queues))}")
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        follower.release()  # another follower (a --resume elsewhere) may take the run on
        raise stopped_by_full_disk(run_dir, run_id, exc, _written(follower)) from None
    written = _written(follower)
    recovered = (recovered or RowsRecovered()).model_copy(
        update={"rows_restored_to_redis": follower.restored or None})
    if prog.error:
        follower.release()
        write_status(run_dir, read_status(run_dir).failed(prog.error, rows=written,
                                                          recovered=recovered))
        return RunResult(manifest, run_dir, RunStatus.FAILED, written, error=prog.error)
    try:
        return finish_run(manifest, run_dir, written, cancelled=prog.cancelled,
                          recovered=recovered,
                          cancelled_jobs=prog.cancelled_jobs if prog.cancelled else None)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise stopped_by_full_disk(run_dir, run_id, exc, written) from None
    finally:
        follower.release()


def _written(follower: Follower) -> int:
    return follower.aggregator.written if follower.aggregator else 0


def record_resume(run_dir: Path, *, now: float | None = None) -> float:
    """Before a distributed resume sends again the jobs without a row: the time the run
    stood still since its last activity (its recorded end, or its newest row, whichever is
    later) is added to ``status.json``'s ``paused_s`` (``StatusRecord.resend_started``),
    which the summary leaves out of the run's wall time and throughput. Returns this pause
    (0 when the run left no trace of when it stopped)."""
    now = time.time() if now is None else now
    status = read_status(run_dir)
    last_row_at = newest_row_finished_at(run_dir / "rows.jsonl")
    resending = status.resend_started(now, last_row_at=last_row_at)
    if resending != status:
        write_status(run_dir, resending)
    return status.pause_before(now, last_row_at=last_row_at)


def newest_row_finished_at(rows_path: Path, tail_bytes: int = 1 << 16) -> float | None:
    """``finished_at`` of the last complete row of a rows file (rows are appended as they
    land, so it is the newest), read from the file's tail; None without one."""
    import json

    try:
        with rows_path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - tail_bytes))
            tail = fh.read()
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        try:
            value = json.loads(line).get("finished_at")
        except (ValueError, AttributeError):
            continue  # a line cut by the tail's start or by a kill
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def finish_run(manifest: Manifest, run_dir: Path, written: int, *, cancelled: bool = False,
               interrupted: bool = False, recovered: RowsRecovered | None = None,
               cancelled_jobs: int | None = None, retry: RetryEntry | None = None) -> RunResult:
    """End the run: its status (``StatusRecord.finished`` says which), summary and record.
    ``written`` counts distinct job ids: the run is complete when every planned job has a row."""
    from qfarm.producer.reports.record import write_record
    from qfarm.producer.reports.summary import write_summary  # matplotlib is slow to import

    final = read_status(run_dir).finished(
        time.time(), rows=written, n_jobs=manifest.n_jobs, cancelled=cancelled,
        interrupted=interrupted, recovered=recovered, cancelled_jobs=cancelled_jobs, retry=retry)
    # The summary first, then the final status (``write_summary`` writes it, its error rows
    # counted): whoever sees the final status (the API, the viewer) finds the summary.
    summary = write_summary(run_dir, status=final, record_cost=True)
    write_record(run_dir)  # last: it digests the files written above
    assert final.status is not None
    return RunResult(manifest, run_dir, final.status, written, summary=summary)
