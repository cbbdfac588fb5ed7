"""The parts of a sweep: its plan and manifest, enqueueing, following, reconciling.

``launch``, ``eager``, ``distributed``, ``follow`` and ``retry`` beside it put them
together (``launch`` checks every input before a run directory exists or a message is
sent, so bad input leaves nothing half-written or half-enqueued).
"""

from __future__ import annotations

import contextlib
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import InputError
from qfarm.common.jobs import (
    bundle_label,
    bundles,
    check_samples,
    plan_jobs,
    ref_for,
)
from qfarm.common.models import Job, Manifest, Question
from qfarm.common.questions import (
    DEFAULT_MAX_QUESTION_CHARS,
    digest_content,
    parse_questions,
    reselect_questions,
)
from qfarm.producer import interrupts
from qfarm.producer.runs.aggregator import Aggregator
from qfarm.producer.runs.lease import FollowerLease
from qfarm.producer.store import ProducerStore, Progress
from qfarm.worker.broker import REDIS_DOWN

ENQUEUE_BATCH = 1000


# A question file is read whole: a million questions of 200 characters is 200 MB.
MAX_QUESTION_FILE_BYTES = 256 << 20


def load_questions(
    path: Path, max_chars: int = DEFAULT_MAX_QUESTION_CHARS
) -> tuple[list[Question], str]:
    """Read and parse a question file; returns the questions and the file digest.
    ``max_chars``: the longest question (QFARM_MAX_QUESTION_CHARS)."""
    if not path.exists():
        raise InputError(f"{path}: no such question file; pass a .txt (one per line) or .jsonl file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a question file")
    if not stat.S_ISREG(path.stat().st_mode):
        # A FIFO would block the read forever, /dev/zero would fill the memory.
        raise InputError(f"{path}: not a regular file (a device, pipe or socket); save the "
                         "questions to a file and pass that")
    with path.open("rb") as fh:
        data = fh.read(MAX_QUESTION_FILE_BYTES + 1)
    if len(data) > MAX_QUESTION_FILE_BYTES:
        raise InputError(f"{path}: larger than {MAX_QUESTION_FILE_BYTES >> 20} MiB; split the "
                         "questions into several runs")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text; save the file as UTF-8") from exc
    return parse_questions(str(path), text, max_chars=max_chars), digest_content(data)


def run_questions(manifest: Manifest, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> list[Question]:
    """The questions of a run, read again from its question file (``--resume``, a follower
    re-sending lost jobs): the file must not have changed, and a ``--limit``/``--sample``
    run takes the same questions again."""
    questions, digest = load_questions(Path(manifest.question_file), max_chars)
    if digest != manifest.question_file_digest:
        raise InputError(
            f"{manifest.question_file}: changed since run {manifest.run_id} started "
            f"({digest} != {manifest.question_file_digest}); restore it or start a new sweep"
        )
    return reselect_questions(questions, manifest.selection)


@dataclass(frozen=True)
class SweepPlan:
    manifest: Manifest
    questions: list[Question]

    def jobs(self) -> Iterable[Job]:
        m = self.manifest
        return plan_jobs(m.run_id, self.questions, m.modes, m.n, m)


def make_manifest(**fields: Any) -> Manifest:
    """A new run's manifest, stamped now: ``fields`` are ``Manifest``'s own, which states
    them and derives the rest (job count, policy hashes, model profile)."""
    check_samples(fields.get("n", 1))
    return Manifest(created_at=time.time(), **fields)


def enqueue_jobs(
    app, jobs: Iterable[Job], *, stage: keys.Stage = keys.RETRIEVE, bundle_size: int = 1
) -> int:
    """Publish jobs as compact messages, pipelined through kombu's producer batch.

    With ``bundle_size`` > 1, consecutive jobs share one message (a bundle: the
    stages handle its jobs together; see worker/flow.py). Returns the number of
    jobs sent.
    """
    task = app.tasks[stage.task]
    sent = 0
    with app.producer_or_acquire() as producer:
        # Producer.batch (kombu >= 5.7) pipelines the publishes; older kombu publishes one by one.
        batch = producer.batch(ENQUEUE_BATCH) if hasattr(producer, "batch") else nullcontext()
        with batch:
            for bundle in bundles(jobs, bundle_size):
                now = time.time()
                refs = [
                    ref_for(job.model_copy(update={"enqueued_at": now})).model_dump(
                        mode="json", exclude_none=True
                    )
                    for job in bundle
                ]
                task.apply_async(
                    args=[refs],
                    producer=producer,
                    argsrepr=f"<{bundle_label(bundle[0], len(bundle))}>",
                    kwargsrepr="",
                )
                sent += len(bundle)
    return sent


def missing_jobs(plan: SweepPlan, store: ProducerStore, chunk: int = 1000) -> Iterator[Job]:
    """The plan's jobs that have no row, checked a chunk at a time: a million-job plan is
    never held whole (its jobs would take gigabytes)."""
    for part in bundles(plan.jobs(), chunk):
        have = store.existing_job_ids(plan.manifest.run_id, (j.job_id for j in part))
        yield from (j for j in part if j.job_id not in have)


class RedisGone(Exception):
    """Redis stayed unreachable longer than the follower was told to wait."""


class NoWorkers(Exception):
    """No worker consumed some of the run's queues for as long as the follower was told to
    wait: the run's jobs wait in those queues, and nothing would ever land."""

    def __init__(self, queues: list[str], waited_s: float):
        super().__init__(f"no worker consumed the queue{'s' if len(queues) > 1 else ''} "
                         f"{', '.join(queues)} for {waited_s:.0f}s")
        self.queues = queues
        self.waited_s = waited_s


@dataclass
class Follower:
    """Follows a run until every job has a row: drains rows into rows.jsonl (while it
    holds the run's follower lease), rides out Redis outages, heals a run Redis lost.

    ``reconcile`` is called when the run has made no progress for ``stall_s``; it
    re-enqueues jobs whose messages were lost (see ``reconcile_run``). ``say``
    prints a line for the operator.

    ``unconsumed`` names the run's queues no worker consumes (``consumers.unconsumed_queues``):
    it is asked every ``consumer_check_s`` while no row lands. The follower says at once
    which queues have no worker and how to start one, and raises ``NoWorkers`` once they
    have had none for ``wait_for_workers_s`` (0: it waits as long as it takes).

    With ``accept`` (``--retry-errors``: only the new attempts' rows of ``expected`` jobs)
    the rows drained are those it takes, and progress counts them: the follow ends when
    each of the ``expected`` jobs has one.
    """

    store: ProducerStore
    manifest: Manifest
    rows_path: Path
    lease: FollowerLease | None = None
    reconcile: Callable[[], int] | None = None
    say: Callable[[str], None] = print
    reconnect_s: float = 300.0
    poll_s: float = 0.5
    settle_s: float = 3.0
    stall_s: float = 10.0
    aggregator: Aggregator | None = None
    accept: Callable[[str, bytes], bool] | None = None
    expected: int | None = None  # the rows to wait for (default: every job of the run)
    restored: int = 0  # rows written back into Redis from rows.jsonl
    unconsumed: Callable[[], list[str]] | None = None
    wait_for_workers_s: float = 60.0
    consumer_check_s: float = 2.0
    worker_hint: Callable[[list[str]], str] | None = None  # how to start workers for queues
    _watching: bool = field(default=False, repr=False)
    _done_seen: int = field(default=-1, repr=False)
    _next_consumer_check: float = field(default=0.0, repr=False)
    _unconsumed_since: float | None = field(default=None, repr=False)
    _was_down: bool = field(default=False, repr=False)  # Redis was away during the last step

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def total(self) -> int:
        return self.manifest.n_jobs if self.expected is None else self.expected

    def step(self, on_progress: Callable[[Progress], None] | None = None) -> Progress:
        """One poll of the follow: drain the rows that landed into the rows file and report
        the progress. ``run`` repeats it until the run ends; an eager run, whose jobs run in
        this process, has its runner call it between jobs instead."""
        prog, self._was_down = self._poll_until_reachable()
        if on_progress:
            on_progress(prog)
        return prog

    def run(
        self, on_progress: Callable[[Progress], None] | None = None, timeout_s: float | None = None
    ) -> Progress:
        """Follow until done, cancelled and quiet, or a run-level error; returns the last progress."""
        deadline = time.monotonic() + timeout_s if timeout_s else None
        last_done, quiet_since = -1, time.monotonic()
        while True:
            interrupts.check()  # a Ctrl-C that a finalizer swallowed ends the follow too
            prog = self.step(on_progress)
            now = time.monotonic()
            if self._was_down:  # Redis was away: the quiet time starts again
                quiet_since = now
            if prog.error:
                return prog
            agg = self.aggregator
            try:
                if self.unconsumed is not None and not prog.cancelled and prog.done < self.total:
                    self._check_consumers(prog.done)
                if prog.done >= self.total and agg is not None:
                    agg.drain()
                    if agg.written < self.total:  # the log was rebuilt under our cursor
                        agg.rescan()
                    return prog
                if prog.done != last_done:
                    last_done, quiet_since = prog.done, now
                elif prog.cancelled and now - quiet_since >= self.settle_s and agg is not None:
                    agg.drain()
                    return prog
                elif (self.reconcile and agg is not None and not prog.cancelled
                      and now - quiet_since >= self.stall_s):
                    quiet_since = now
                    self.reconcile()
            except REDIS_DOWN:
                pass  # the next poll waits for Redis to come back
            if deadline and now > deadline:
                return prog
            time.sleep(self.poll_s)

    def _check_consumers(self, done: int) -> None:
        """Warn when some of the run's queues have no worker; ``NoWorkers`` past the bound."""
        now = time.monotonic()
        if done != self._done_seen:
            first, self._done_seen = self._done_seen < 0, done
            if not first:  # rows are landing: workers are at it
                self._next_consumer_check = now + self.consumer_check_s
                self._unconsumed_since = None
                return
        if now < self._next_consumer_check or self.unconsumed is None:
            return
        missing = self.unconsumed()
        now = time.monotonic()
        self._next_consumer_check = now + self.consumer_check_s
        if not missing:
            if self._unconsumed_since is not None:
                self.say(f"run {self.run_id}: every queue of the run has a worker now; following")
            self._unconsumed_since = None
            return
        if self._unconsumed_since is None:
            self._unconsumed_since = now
            bound = (f"stops after {self.wait_for_workers_s:.0f}s without one (--wait-for-workers "
                     "[SECONDS] or QFARM_WAIT_FOR_WORKERS_S waits longer)"
                     if self.wait_for_workers_s > 0 else "waits for one")
            start = f"; start workers with: {self.worker_hint(missing)}" if self.worker_hint else ""
            self.say(f"run {self.run_id}: warning: no worker consumes the queue"
                     f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}, where its jobs "
                     f"wait{start}; this follow {bound}")
        elif self.wait_for_workers_s > 0 and now - self._unconsumed_since >= self.wait_for_workers_s:
            raise NoWorkers(missing, now - self._unconsumed_since)

    def _poll_until_reachable(self) -> tuple[Progress, bool]:
        """One poll; while Redis is unreachable, retry with backoff for up to ``reconnect_s``.
        Returns the progress and whether Redis was away in between."""
        down_since: float | None = None
        backoff = self.poll_s
        while True:
            try:
                prog = self._poll()
            except REDIS_DOWN as exc:
                now = time.monotonic()
                if down_since is None:
                    down_since = now
                    self.say(f"run {self.run_id}: Redis unreachable ({type(exc).__name__}); "
                             f"reconnecting for up to {self.reconnect_s:.0f}s (QFARM_REDIS_RECONNECT_S)")
                if now - down_since > self.reconnect_s:
                    raise RedisGone(f"Redis unreachable for {now - down_since:.0f}s") from exc
                time.sleep(backoff)
                interrupts.check()
                backoff = min(backoff * 2, 5.0)
                continue
            if down_since is not None:
                self.say(f"run {self.run_id}: Redis is back after "
                         f"{time.monotonic() - down_since:.1f}s; following again")
            return prog, down_since is not None

    def _poll(self) -> Progress:
        holding = self.lease.hold() if self.lease else True
        if holding and self.aggregator is None:
            if self._watching:
                self.say(f"run {self.run_id}: the other follower is gone; this one drains the rows now")
            self.aggregator = Aggregator(self.store, self.run_id, self.rows_path, self.accept)
            self._watching = False
        elif not holding and not self._watching:
            holder = self.lease.holder() if self.lease else None
            self.say(f"run {self.run_id}: rows are being drained by {holder or 'another follower'}; "
                     "watching progress read-only (this one takes over if that one stops)")
            self.aggregator, self._watching = None, True
        prog = self.store.progress(self.run_id, self.total)
        if self.aggregator is not None:
            if not prog.has_manifest:
                self.heal()
            self.aggregator.drain()
            if self.accept is not None:  # the rows that count are the ones it takes
                prog = replace(prog, done=self.aggregator.written)
        return prog

    def heal(self) -> None:
        """Redis lost the run (restarted without persistence): put back its manifest and the
        rows of rows.jsonl, then re-send the jobs that have neither a row nor a message."""
        assert self.aggregator is not None
        self.store.put_manifest(self.manifest)
        restored = self.aggregator.restore_to_redis()
        self.restored += restored
        self.aggregator.cursor = 0
        self.say(f"run {self.run_id}: Redis had lost this run; restored its manifest and "
                 f"{restored} rows from {self.rows_path.name}")
        if self.reconcile:
            self.reconcile()

    def release(self) -> None:
        if self.lease is not None:
            with contextlib.suppress(*REDIS_DOWN):
                self.lease.release()


def reconcile_run(app, plan: SweepPlan, store: ProducerStore, *, bundle_size: int = 1) -> int:
    """Re-enqueue the jobs of a stalled run that have no row and no message anywhere.

    kombu's Redis transport moves a message into its ``unacked`` hash only after
    the worker has read the BRPOP reply; a worker killed in between loses that
    message. A run with no progress, none of its messages in any queue or in
    ``unacked``, and jobs still without a row has lost messages: send those jobs
    again. Should a message have been in flight after all, the duplicate is
    harmless (rows are write-once and a job with a row is skipped).
    """
    if store.pending_message_count(plan.manifest.run_id) > 0:
        return 0
    return enqueue_jobs(app, missing_jobs(plan, store), bundle_size=bundle_size)
