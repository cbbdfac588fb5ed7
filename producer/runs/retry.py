"""``--retry-errors``: run again, in the same run, exactly the jobs whose row is an error.

A retry keeps one row per job id. Each retried job carries the error kinds of its earlier
attempts (``Job.retried_errors``; their number is the attempt), and the row write accepts a
replacement only of an error row by a later attempt (common/keys.py), so redelivered or
duplicated messages still leave one row. The replacements land in ``retry.jsonl`` beside
``rows.jsonl``; when the retry ends they take their error rows' places in ``rows.jsonl``
(the same line order), the summary is rendered again and the run record is written anew.
A retry that stops half-way leaves ``retry.jsonl``: the next retry merges it first, so no
success is ever run twice.

The retry runs under the run's recorded policy, model and index: a retry asked for with a
different one is refused (those rows would not belong to the run), with the way to start a
new run instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError, ServiceError
from qfarm.common.grounding.rows import is_error_row, is_replaceable, retry_kinds, row_attempt
from qfarm.common.jobs import job_from_ref
from qfarm.common.models import Job, JobRef, Manifest
from qfarm.common.policy import Policy, governance_policy_hash
from qfarm.common.questions import reselect_questions
from qfarm.common.runstatus import RetryEntry
from qfarm.common.settings import Settings, load_settings
from qfarm.common.vocab import RunStatus
from qfarm.producer import interrupts
from qfarm.producer.reports.rows import parse_row
from qfarm.producer.rundir import producer_alive, read_manifest, read_status, write_status
from qfarm.producer.runs.aggregator import Aggregator, _line_job_id, cut_partial_line, file_rows
from qfarm.producer.runs.consumers import worker_commands
from qfarm.producer.runs.eager import run_in_process
from qfarm.producer.runs.follow import finish_run, worker_watch
from qfarm.producer.runs.lease import FollowerLease
from qfarm.producer.runs.services import (
    celery_app,
    check_same_preflight,
    enqueue_counted,
    open_local_retriever,
    require_endpoints_for_workers,
)
from qfarm.producer.runs.sweep import Follower, NoWorkers, RedisGone, SweepPlan, load_questions
from qfarm.producer.runs.types import (
    EndpointsFor,
    OnProgress,
    QuestionSet,
    RunResult,
    Say,
    configured_endpoints,
)
from qfarm.producer.store import ProducerStore, connect
from qfarm.worker.broker import REDIS_DOWN

log = logging.getLogger(__name__)

RETRY_ROWS = "retry.jsonl"
RETRY_LOCK = ".retry.lock"


@contextmanager
def one_retry_at_a_time(run_dir: Path, run_id: str) -> Iterator[None]:
    """Hold the run's retry lock (an exclusive ``flock``, freed when the process ends however
    it ends): a second ``--retry-errors`` of the run would merge, and delete, the first's
    ``retry.jsonl`` while it is being written, and the first would then wait forever."""
    with (run_dir / RETRY_LOCK).open("a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise InputError(f"run {run_id} is being retried already ({holder}); wait for that "
                             "retry to end, or stop it, then retry again") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
ROWS = "rows.jsonl"


@dataclass(frozen=True)
class RetryPlan:
    """The error rows' jobs of one run, each carrying its earlier attempts' error kinds."""

    manifest: Manifest
    run_dir: Path
    jobs: list[Job]

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def targets(self) -> dict[str, int]:
        """Job id -> the attempt this retry runs."""
        return {job.job_id: job.attempt for job in self.jobs}

    def accept(self, job_id: str, raw: bytes) -> bool:
        """Whether a row from Redis is this retry's row of one of its jobs."""
        target = self.targets.get(job_id)
        row = parse_row(raw)
        return target is not None and row is not None and row_attempt(row) >= target


def error_rows(rows_path: Path) -> dict[str, dict[str, Any]]:
    """Job id -> the row of each job whose row in ``rows_path`` is an error row."""
    found: dict[str, dict[str, Any]] = {}
    for job_id, line in file_rows(rows_path):
        row = parse_row(line)
        if row is None:
            continue
        if is_error_row(row):
            found[job_id] = row
        else:
            found.pop(job_id, None)
    return found


def merge_retry_rows(run_dir: Path) -> int:
    """Put the rows of ``retry.jsonl`` in the places of the error rows they replace in
    ``rows.jsonl`` (a row replaces only an error row of an earlier attempt), then remove
    ``retry.jsonl``; returns how many rows were replaced. Rewrites ``rows.jsonl`` atomically."""
    retry_path, rows_path = run_dir / RETRY_ROWS, run_dir / ROWS
    if not retry_path.exists():
        return 0
    cut_partial_line(retry_path)
    fresh: dict[str, tuple[int, bytes]] = {}
    for job_id, line in file_rows(retry_path):
        row = parse_row(line)
        if row is not None and row_attempt(row) >= fresh.get(job_id, (-1, b""))[0]:
            fresh[job_id] = (row_attempt(row), line)
    replaced = 0
    with rows_path.open("ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # no aggregator appends while the file is rewritten
        try:
            cut_partial_line(rows_path)
            tmp = rows_path.with_name(rows_path.name + ".tmp")
            named: set[str] = set()
            with tmp.open("wb") as out:
                for line in _lines(rows_path):
                    line_job = _line_job_id(line)
                    new = fresh.pop(line_job, None) if line_job else None
                    if line_job:
                        named.add(line_job)
                    # Only a line a retry row may replace is parsed: the rest are copied.
                    if new is not None and is_replaceable(line, new[0]):
                        out.write(new[1])
                        replaced += 1
                    else:
                        out.write(line)
                # A retry's row for a job the file has no row of (cut short since) goes last.
                for job_id, (_, line) in fresh.items():
                    if job_id not in named:
                        out.write(line)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, rows_path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    retry_path.unlink()
    return replaced


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        yield from fh


def check_same_run(manifest: Manifest, *, settings: Settings, policy: Policy | None,
                   index_version: str | None) -> None:
    """Refuse a retry under another policy, model or index than the run's."""
    run_id = manifest.run_id
    new_run = (f"retried rows must come from what made the run's other rows; to use the new "
               f"one, start a new run (qfarm sweep {manifest.question_file} ...)")
    if policy is not None and governance_policy_hash(policy) != manifest.governance_policy_hash:
        raise InputError(f"run {run_id}: the policy given differs from the run's "
                         f"(governance hash {governance_policy_hash(policy)} != "
                         f"{manifest.governance_policy_hash}); drop the --policy flags to retry "
                         f"under the run's policy, or: {new_run}")
    if settings.model != manifest.model:
        raise InputError(f"run {run_id}: QFARM_MODEL is {settings.model!r} but the run used "
                         f"{manifest.model!r}; set QFARM_MODEL={manifest.model}, or: {new_run}")
    if index_version != manifest.index_version:
        raise InputError(f"run {run_id}: the index is now {index_version!r} but the run used "
                         f"{manifest.index_version!r}; point QFARM_INDEX_PATH (or the search "
                         f"cluster) at the run's index, or: {new_run}")


def plan_retry(run_id: str, settings: Settings, *, questions: QuestionSet | None = None,
               policy: Policy | None = None, index_version: str | None = None,
               check_index: bool = True, retriever: Any = None) -> RetryPlan:
    """The jobs to retry, after every check (nothing runs or changes before it returns,
    except a half-done earlier retry's rows merged into rows.jsonl)."""
    run_dir = settings.results_dir / run_id
    manifest = read_manifest(run_dir)
    status = read_status(run_dir)
    status.check_ended(run_id, producer_alive(status), then="retry its errors once it has ended")
    if check_index:
        check_same_run(manifest, settings=settings, policy=policy, index_version=index_version)
    source = Path(manifest.question_file)
    if questions is None and not source.is_file():
        # A run whose questions came in a request (the HTTP API) or from Python: each error
        # row names its question, so the retried jobs are rebuilt from the rows.
        merge_retry_rows(run_dir)
        errors = error_rows(run_dir / ROWS)
        jobs = [job_from_ref(JobRef(run_id=run_id, qid=row["question_id"], q=row["question"],
                                    mode=row["mode"], i=row["sample_index"],
                                    scope=row.get("question_scope"), r=retry_kinds(row)),
                             manifest) for row in errors.values()]
        return RetryPlan(manifest=manifest, run_dir=run_dir,
                         jobs=[j for j in jobs if j.job_id in errors])
    if questions is None:
        qs, digest = load_questions(source, settings.max_question_chars)
    else:
        qs, digest = questions.questions, questions.digest
    if digest != manifest.question_file_digest:
        raise InputError(f"{manifest.question_file}: changed since run {run_id} started "
                         f"({digest} != {manifest.question_file_digest}); restore it to retry "
                         "the run's errors, or start a new run")
    if retriever is not None:
        check_same_preflight(manifest, (q.text for q in reselect_questions(qs, manifest.selection)),
                             retriever, "retry its errors")
    merge_retry_rows(run_dir)
    errors = error_rows(run_dir / ROWS)
    jobs = [job.model_copy(update={"retried_errors": retry_kinds(errors[job.job_id])})
            for job in SweepPlan(manifest=manifest, questions=qs).jobs() if job.job_id in errors]
    return RetryPlan(manifest=manifest, run_dir=run_dir, jobs=jobs)


def retry_errors(
    run_id: str,
    *,
    eager: bool | None = None,
    settings: Settings | None = None,
    questions: QuestionSet | None = None,
    policy: Policy | None = None,
    on_progress: OnProgress | None = None,
    say: Say | None = None,
    endpoints: EndpointsFor = configured_endpoints,
    serial: bool = False,
) -> RunResult:
    """Run again the jobs of ``run_id`` whose row is an error (``qfarm sweep --retry-errors``);
    eagerly when the run was eager (or ``eager`` says so), else on the farm's workers.

    ``questions`` stands in for the run's question file (its digest must match); ``policy``,
    if given, must be the run's. Returns when every retried job has its new row."""
    from qfarm.producer.runs.services import say_to_log

    settings = settings or load_settings()
    say = say or say_to_log
    manifest = read_manifest(settings.results_dir / run_id)
    eager = manifest.eager if eager is None else eager
    if not eager:
        require_endpoints_for_workers(settings)
    retriever = open_local_retriever(settings, progress=False)
    with one_retry_at_a_time(settings.results_dir / run_id, run_id), endpoints(settings) as eps:
        # The endpoints' own settings (a local model's name, its gateway limits) count for
        # the model check as they did when the run started.
        settings = eps.apply(settings) if eager else settings
        plan = plan_retry(run_id, settings, questions=questions, policy=policy,
                          index_version=retriever.index_version(), retriever=retriever)
        if not plan.jobs:
            say(f"run {run_id}: no error rows; nothing to retry")
            return _finish(plan, started=time.time(), replaced=0)
        say(f"run {run_id}: retrying {len(plan.jobs)} jobs whose row is an error")
        started = time.time()
        write_status(plan.run_dir, read_status(plan.run_dir).retry_started(started,
                                                                            jobs=len(plan.jobs)))
        if eager:
            done = _run_eager(plan, settings, retriever, len(eps.urls), on_progress, serial=serial)
        else:
            done = _run_distributed(plan, settings, on_progress, say)
    if not done:
        return RunResult(plan.manifest, plan.run_dir, RunStatus.INTERRUPTED,
                         _count_ids(plan.run_dir / ROWS),
                         error=f"retry stopped; its rows so far are kept in {RETRY_ROWS} and "
                               f"merged by the next: qfarm sweep --retry-errors {run_id}")
    replaced = merge_retry_rows(plan.run_dir)
    return _finish(plan, started=started, replaced=replaced)


def _finish(plan: RetryPlan, *, started: float, replaced: int) -> RunResult:
    rows_path = plan.run_dir / ROWS
    still = len(error_rows(rows_path))
    status = read_status(plan.run_dir)
    entry = RetryEntry(started_at=started, finished_at=time.time(), jobs=len(plan.jobs),
                       replaced=replaced, error_rows_after=still)
    # A cancelled run stays cancelled while jobs it never ran have no row.
    return finish_run(plan.manifest, plan.run_dir, _count_ids(rows_path),
                      cancelled=status.status == RunStatus.CANCELLED, retry=entry)


def _count_ids(rows_path: Path) -> int:
    return len({job_id for job_id, _ in file_rows(rows_path)})


def _run_eager(plan: RetryPlan, settings: Settings, retriever: Any, n_endpoints: int,
               on_progress: OnProgress | None, *, serial: bool) -> bool:
    """Run the retry's jobs in this process, as an eager run's; False if interrupted (Ctrl-C)."""

    rows_path = plan.run_dir / RETRY_ROWS

    def follow(store: ProducerStore) -> Follower:  # the new attempts' rows, as on the farm
        return Follower(store, plan.manifest, rows_path, accept=plan.accept,
                        expected=len(plan.jobs), say=log.warning)

    _, _, finished = run_in_process(plan.manifest, plan.jobs, follow, settings, retriever,
                                    n_endpoints, on_progress, serial=serial)
    return finished


def _run_distributed(plan: RetryPlan, settings: Settings, on_progress: OnProgress | None,
                     say: Say) -> bool:
    """Send the retry's jobs to the workers and follow them until each has its new row;
    False if interrupted."""
    store = ProducerStore(connect(settings.redis_url))
    run_id = plan.run_id
    if store.progress(run_id, 0).cancelled:
        raise InputError(f"run {run_id} was cancelled: its cancel flag in Redis stops every job "
                         "of it; start a new run for its questions")
    lease = FollowerLease(store.client, run_id)
    if not lease.hold():
        raise InputError(f"run {run_id} is being followed by {lease.holder() or 'another process'}; "
                         "retry its errors once that one has ended")
    app = celery_app(settings)
    return follow_retry(
        plan, store, lease,
        lambda jobs: enqueue_counted(app, store, jobs, bundle_size=settings.bundle_size),
        on_progress, say, reconnect_s=settings.redis_reconnect_s,
        watch=worker_watch(store, settings))


def follow_retry(plan: RetryPlan, store: ProducerStore, lease: FollowerLease,
                 send: Callable[[list[Job]], int], on_progress: OnProgress | None, say: Say, *,
                 reconnect_s: float, poll_s: float = 0.5, stall_s: float = 10.0,
                 watch: dict[str, Any] | None = None) -> bool:
    """Send the retry's jobs (``send``) and follow them with the run's ``Follower`` until each
    has its new row in retry.jsonl: it rides out Redis outages, heals a run Redis lost, hands
    over between followers, and re-sends jobs left with no row and no message (a duplicate is
    harmless: the row write takes one row per attempt). ``watch``: the follower's watch for
    queues without a worker (``follow.worker_watch``). False if interrupted."""
    run_id = plan.run_id
    rows_path = plan.run_dir / RETRY_ROWS
    try:
        if not store.has_manifest(run_id):
            store.put_manifest(plan.manifest)
        # The error rows must be in Redis for the replacements to find (after a Redis restart
        # they may not be); rows of an earlier, half-done retry are put back as well.
        store.restore_rows(run_id, file_rows(plan.run_dir / ROWS))
        agg = Aggregator(store, run_id, rows_path, accept=plan.accept)
        agg.drain()
        follower = Follower(store, plan.manifest, rows_path, lease=lease, say=say,
                            reconnect_s=reconnect_s, poll_s=poll_s, stall_s=stall_s,
                            aggregator=agg, accept=plan.accept, expected=len(plan.jobs),
                            **(watch or {}))

        def resend_lost() -> int:
            if store.pending_message_count(run_id) > 0:
                return 0
            seen = follower.aggregator.seen if follower.aggregator else agg.seen
            sent = send([j for j in plan.jobs if j.job_id not in seen])
            if sent:
                say(f"run {run_id}: {sent} retried jobs had no row and no message left; "
                    "sent them again")
            return sent

        follower.reconcile = resend_lost
        send([j for j in plan.jobs if j.job_id not in agg.seen])
        prog = follower.run(on_progress=on_progress)
    except KeyboardInterrupt:
        interrupts.handled()
        return False
    except RedisGone as exc:
        raise ServiceError(f"run {run_id}: {exc}; the retry's rows so far are kept in "
                           f"{RETRY_ROWS}: qfarm sweep --retry-errors {run_id} goes on") from exc
    except NoWorkers as exc:
        raise ServiceError(
            f"run {run_id}: {exc}; start workers with: {' and '.join(worker_commands(exc.queues))}"
            f". The retried jobs stay queued and the rows so far are kept in {RETRY_ROWS}: "
            f"qfarm sweep --retry-errors {run_id} goes on once a worker runs") from exc
    finally:
        with contextlib.suppress(*REDIS_DOWN):
            lease.release()
    if prog.error:
        raise InputError(f"run {run_id}: {prog.error}")
    return True
