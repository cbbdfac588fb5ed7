"""The in-process runner: a run's jobs through the same stages as the farm, concurrently.

Eager runs (``qfarm sweep --eager``, ``qfarm ask --eager``, ``run_sweep(...,
eager=True)``) have no broker and no workers, but the GPU still wants
``QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT`` requests in flight per endpoint. So:

* it walks the same chain as the Celery tasks (``qfarm.worker.stages.CHAIN``), its CPU
  links in a small thread pool through the tasks' own entry, ``flow.handle_stage``
  (for the first: entry check, preflight, cache, retrieval; for every link: its
  step, rows for jobs that end there, the rest on to the next link);
* the model's link (``calls_model``) runs as the same entry's parts, its step's wait
  left to the async gateway instead of a thread: ``flow.enter_stage``, the step's
  ``ask`` for each job's request (``Gateway.submit_many``), its ``settle`` for each
  answer, then ``flow.leave``. An answer queues the job for the links after it
  (verification, sidecar, the row write), which a pool thread runs on every job
  answered meanwhile at once (up to ``PAST_MODEL_BATCH``): one entry check and one
  row write a batch, as a verify worker does a bundle, instead of one each per job;
* at most twice ``max_inflight`` (the sum of the endpoints' in-flight caps)
  jobs are between admission and the end of their LLM call: the gateway
  keeps its cap in flight and the rest queued, and a row is written as each
  job ends.

Rows are the Celery tasks' rows (same stage code, same store, same row script);
only timings, and so the order of rows, differ. ``qfarm sweep --eager --serial``
runs this runner on one job at a time, each ``run`` to its row (for debugging).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import ServiceError
from qfarm.common.jobs import bundles, ref_for
from qfarm.common.logs import log_context
from qfarm.common.models import Job, JobRecord
from qfarm.common.vocab import Backend
from qfarm.worker import flow, pipeline, stages
from qfarm.worker.services import Services

log = logging.getLogger("qfarm.worker")

# Threads for retrieval and verification. They hold the GIL while they work, so a second
# adds no CPU: it pays where a search waits outside the interpreter (a search node's answer
# over HTTP, overlapped with the other thread's verification), and costs GIL hand-offs
# where none does. The embedded index's search is Python and NumPy from the first posting
# to the last: with one thread an eager sweep of 1,976 distinct questions spent 5-8 % less
# CPU a request (two simulated endpoints flowed at 0.76 of ideal against 0.74; one at 0.90
# either way, bench/README 'CPU per job').
CPU_THREADS = 2
EMBEDDED_CPU_THREADS = 1
# Answered jobs taken through the links after the model's at once, at most: enough to
# spread a batch's fixed cost (entry check, row write) thin, few enough that a row
# waits for at most this many verifications.
PAST_MODEL_BATCH = 32
# How long an answer may wait for others before its batch starts anyway. Answers that
# arrive slower than the pool drains them (one endpoint's) would otherwise go past the
# model two or three at a time, each batch paying the fixed cost again: 865 row writes for
# 1,976 distinct jobs on one simulated endpoint, 183 at 20 ms, and about 0.2 ms less CPU
# a request (bench/README, 'CPU per job'); 50 and 100 ms saved no more, and the requests
# flowed a little slower. A row lands this much later at worst; no model slot waits for
# it (the slot is freed as the answer arrives).
PAST_MODEL_WAIT_S = 0.02
# The interpreter's switch interval while a runner runs (Python's default is 5 ms). The
# pool threads hold the GIL most of the time, and at 5 ms they and the gateway's loop
# take it from each other hundreds of times a second, each forced hand-off a kernel
# wake-up and cold caches. At 20 ms an eager sweep of 1,976 distinct questions spent
# about 5 % less CPU a request and two simulated endpoints flowed faster (bench/README,
# 'CPU per job'); 50 and 100 ms measured the same as 20 within noise, and each is what
# an answer may wait for the loop at worst, so the smallest is kept.
SWITCH_INTERVAL_S = 0.02

# The cyclic collector's first threshold while a runner runs (Python's default is 700
# allocations). A run allocates short-lived objects by the hundred thousand (records,
# replies, rows) beside long-lived caches (searches, evidence analyses, classifications),
# and at 700 the collector ran about 500 times in a sweep of 1,976 jobs, its full passes
# over those caches 0.34-0.47 s of it: 0.55-0.73 s of about 6 s of CPU. At 10,000:
# 0.06-0.15 s. Cyclic garbage waits a little longer to be freed; the rest is freed by its
# reference count as before.
GC_THRESHOLD0 = 10_000

_tuning = threading.Lock()
_tuning_runs = 0
_tuning_saved: tuple[float, tuple[int, int, int]] = (0.005, (700, 10, 10))


def cpu_threads_for(retriever: Any) -> int:
    """The runner's threads for a retriever: one for the embedded index searched in this
    process, which never waits outside the interpreter; two otherwise (a search node, or
    the index searched in a process beside this one, ``searches_elsewhere``)."""
    here = getattr(retriever, "backend", None) == Backend.EMBEDDED
    return EMBEDDED_CPU_THREADS if here and not getattr(retriever, "searches_elsewhere", False) \
        else CPU_THREADS


@contextlib.contextmanager
def throughput_mode(interval_s: float = SWITCH_INTERVAL_S,
                    gc_threshold0: int = GC_THRESHOLD0) -> Iterator[None]:  # fmt: skip
    """While the block runs, a coarser switch interval and a rarer cyclic collector; what
    they were is back once the last of the runners that changed them (several may run in
    one process) has left. Neither is ever lowered, and a collector whose automatic runs
    are off (threshold 0) stays off."""
    global _tuning_runs, _tuning_saved
    with _tuning:
        if _tuning_runs == 0:
            _tuning_saved = (sys.getswitchinterval(), gc.get_threshold())
            interval, (first, second, third) = _tuning_saved
            sys.setswitchinterval(max(interval_s, interval))
            if first:
                gc.set_threshold(max(gc_threshold0, first), second, third)
        _tuning_runs += 1
    try:
        yield
    finally:
        with _tuning:
            _tuning_runs -= 1
            if _tuning_runs == 0:
                sys.setswitchinterval(_tuning_saved[0])
                gc.set_threshold(*_tuning_saved[1])


class InProcessRunner:
    """Runs jobs of runs whose manifests are in ``svc.store``; one ``run`` at a time."""

    def __init__(self, svc: Services, *, max_inflight: int, bundle_size: int = 8,
                 cpu_threads: int = CPU_THREADS):  # fmt: skip
        self._svc = svc
        # Twice the gateway's cap: the gateway then always holds a queue, and a finished
        # request's successor starts on the loop at once. Refilled from this side instead
        # (a GIL hand-off and a loop wake-up per request), one endpoint reached 0.84 of
        # ideal instead of 0.96 (bench/perf/saturation.py --table).
        self._max_inflight = 2 * max(1, max_inflight)
        # A bundle takes a slot per job before it starts: one larger than all the slots
        # would wait for itself forever (sweeps' bundles of 32 against a cap of 8 did).
        self._bundle_size = max(1, min(bundle_size, self._max_inflight))
        self._cpu_threads = max(1, cpu_threads)
        self._slots = threading.Semaphore(self._max_inflight)
        self._pool: ThreadPoolExecutor | None = None
        # Set when a run is interrupted: a job still in flight then ends without a row (its
        # stages are shut down under it), so that `--resume` runs it again; an error row
        # would keep it from running and fail the run's error policy.
        self._stopping = False
        # Answered jobs waiting for the links after the model's, and whether a pool task
        # is draining them (at most one: it takes whatever arrived while it worked).
        self._answered: deque[tuple[stages.Step, JobRecord]] = deque()
        self._answered_lock = threading.Lock()
        self._draining = False
        # A drain is due on the gateway's loop within PAST_MODEL_WAIT_S (``_queue_past_model``).
        self._drain_due = False

    def run(self, jobs: Iterable[Job], *, tick: Callable[[], None] | None = None,
            tick_s: float = 0.25) -> None:  # fmt: skip
        """Every job to its row; ``tick`` is called about every ``tick_s`` seconds (progress)."""
        with throughput_mode():
            self._run(jobs, tick, tick_s)

    def _run(self, jobs: Iterable[Job], tick: Callable[[], None] | None, tick_s: float) -> None:
        tick = tick or (lambda: None)
        last = time.monotonic()
        self._stopping = False
        with self._answered_lock:  # what an interrupted run left queued ends without rows
            self._answered.clear()
            self._draining = self._drain_due = False
        self._pool = ThreadPoolExecutor(self._cpu_threads, thread_name_prefix="qfarm-eager")
        drained = 0
        # Bundles admitted (their slots taken) and not finished: an interruption
        # cancels them, and only this side can give their slots back.
        waiting: dict[Future[None], int] = {}
        lock = threading.Lock()

        def forget(future: Future[None]) -> None:  # done; a cancelled one stays counted
            if not future.cancelled():
                with lock:
                    waiting.pop(future, None)

        try:
            for bundle in bundles(jobs, self._bundle_size):
                for _ in bundle:
                    while not self._slots.acquire(timeout=tick_s):
                        tick()
                        last = time.monotonic()
                now = time.time()
                future = self._pool.submit(
                    self._retrieve, [job.model_copy(update={"enqueued_at": now}) for job in bundle]
                )
                with lock:
                    waiting[future] = len(bundle)
                future.add_done_callback(forget)
                if time.monotonic() - last >= tick_s:
                    tick()
                    last = time.monotonic()
            # Every slot back: every job has left its LLM call (its verification is queued).
            for _ in range(self._max_inflight):
                while not self._slots.acquire(timeout=tick_s):
                    tick()
                drained += 1
            self._start_drain()  # the last answers: no others are coming to wait for
            self._pool.shutdown(wait=True)
        except BaseException as exc:
            self._stopping = True
            # Ctrl-C stops at once; any other failure (a full disk under the rows) lets the
            # bundles already running finish before the services they use are closed: a
            # thread still inside the gateway as it closed crashed the interpreter's exit.
            self._pool.shutdown(wait=not isinstance(exc, KeyboardInterrupt), cancel_futures=True)
            with lock:
                cancelled = [n for future, n in waiting.items() if future.cancelled()]
            for _ in range(sum(cancelled)):
                self._slots.release()
            raise
        finally:
            # Only the slots taken here: jobs still in flight after an interruption free
            # their own, and an extra release would raise the cap for good.
            for _ in range(drained):
                self._slots.release()
        tick()

    # ------------------------------------------------------------------ stages

    def _retrieve(self, jobs: list[Job]) -> None:
        """A bundle's first stage (one search per distinct question), then its prompts go
        to the gateway in one hand-over. Never raises: a job this stage still holds when
        something unexpected raises ends as an error row, and its slot is freed."""
        held = _Held(jobs, self._slots)
        try:
            self._retrieve_bundle(jobs, held)
        except Exception as exc:
            if self._stopping:
                return
            log.debug("bundle failed unexpectedly (%s: %s)", type(exc).__name__, exc, exc_info=True)
            self._error_rows([pipeline.begin(job, worker=self._svc.worker_name)
                              for job in held.jobs()], exc)  # fmt: skip
        finally:
            held.release_all()

    def _retrieve_bundle(self, jobs: list[Job], held: _Held) -> None:
        refs = [ref_for(job).model_dump(mode="json", exclude_none=True) for job in jobs]
        sent: list[tuple[keys.Stage, list[JobRecord]]] = []
        try:
            flow.handle_stage(stages.CHAIN[0].stage, refs, self._svc,
                              lambda stage, rs: sent.append((stage, rs)))  # fmt: skip
        except Exception as exc:  # as the Celery task's _guarded: a bug is the jobs' error rows
            if self._stopping:
                return
            log.debug("bundle failed unexpectedly (%s: %s)", type(exc).__name__, exc, exc_info=True)
            flow.internal_error_rows(refs, self._svc, exc)
        step, records = self._walk(sent)
        # The rest ended here (row written, or skipped): their slots are free.
        held.release_all(keep=[r.job.job_id for r in records])
        if step is None or not records:
            return
        ask = step.ask
        assert ask is not None  # a model step declares both halves (stages.CHAIN's check)
        asks = [(r, ask(r)) for r in records]
        for record, req in asks:
            if req is None:  # nothing to ask: straight on past the model, to its row
                self._queue_past_model(step, record)
                held.release(record.job.job_id)
        sent_asks = [(r, req) for r, req in asks if req is not None]
        if not sent_asks:
            return
        t0 = time.perf_counter()
        requests = [req for _, req in sent_asks]
        gateway = self._svc.gateway
        submit_many = getattr(gateway, "submit_many", None)
        futures: list[Future[Any]]
        if submit_many is not None:
            with log_context(run_id=pipeline.one_run_id(r for r, _ in sent_asks)):
                futures = submit_many(requests)
        else:  # a gateway without futures (tests' canned ones): a pool thread waits instead
            pool = self._pool_or_fail()
            futures = [pool.submit(gateway.generate_many, [r]) for r in requests]
        for (record, _), future in zip(sent_asks, futures, strict=True):
            future.add_done_callback(functools.partial(self._generated, step, record, t0))
            held.hand_over(record.job.job_id)  # its slot and its row are the callback's now

    def _walk(
        self, sent: list[tuple[keys.Stage, list[JobRecord]]]
    ) -> tuple[stages.Step | None, list[JobRecord]]:
        """Carry what a link sent through the chain's next links, here and now, up to the
        model's link: returns it and the records that passed its entry (None: the chain
        ended, every row written)."""
        while sent:
            stage = sent[0][0]
            records = [r for _, rs in sent for r in rs]
            step = stages.step_for(stage)
            if step.calls_model:
                entered, _ = flow.enter_stage(step, records, self._svc)  # no rows: not the first
                return step, entered
            nxt: list[tuple[keys.Stage, list[JobRecord]]] = []
            flow.handle_stage(stage, records, self._svc, lambda s, rs: nxt.append((s, rs)))  # noqa: B023
            sent = nxt
        return None, []

    def _generated(self, step: stages.Step, record: JobRecord, t0: float,
                   future: Future[Any]) -> None:  # fmt: skip
        """On the gateway's loop: queue the rest of the chain, free the slot. Nothing slow here."""
        try:
            if not self._stopping:
                self._queue_past_model(step, _answered(step, record, t0, future))
        except Exception as exc:  # the pool is gone (or a bug): this job's row is written here
            if self._stopping:
                return
            log.debug("job %s failed unexpectedly (%s: %s)", record.job.job_id,
                      type(exc).__name__, exc, exc_info=True)  # its row logs it (flow)
            self._error_rows([record], exc)
        finally:
            self._slots.release()

    def _queue_past_model(self, step: stages.Step, record: JobRecord) -> None:
        """Queue a job for the links after the model's; start a drain unless one runs, or,
        on the gateway's loop with fewer than a batch queued, within ``PAST_MODEL_WAIT_S``
        (the answers that arrive meanwhile join the batch)."""
        with self._answered_lock:
            self._answered.append((step, record))
            if self._draining or (len(self._answered) < PAST_MODEL_BATCH and self._drain_later()):
                return
            self._draining = True
        self._submit_drain()

    def _drain_later(self) -> bool:
        """Under ``_answered_lock``: make sure a drain is due on the running loop; False
        when not on one (a pool thread, a test's gateway): drain now."""
        if self._drain_due:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        loop.call_later(PAST_MODEL_WAIT_S, self._start_drain)
        self._drain_due = True
        return True

    def _start_drain(self) -> None:
        """Start a drain of the queued answers unless one runs or none is queued."""
        with self._answered_lock:
            self._drain_due = False
            if self._draining or not self._answered or self._stopping:
                return
            self._draining = True
        self._submit_drain()

    def _submit_drain(self) -> None:
        try:
            self._pool_or_fail().submit(self._drain_answered)
        except BaseException:
            with self._answered_lock:
                self._draining = False
            raise

    def _drain_answered(self) -> None:
        """On a pool thread: the queued jobs past the model, a batch at a time, until
        none is left (then the next answer starts another drain)."""
        while True:
            with self._answered_lock:
                if not self._answered or self._stopping:  # interrupted: the rest get no row
                    self._draining = False
                    return
                batch = [self._answered.popleft()
                         for _ in range(min(PAST_MODEL_BATCH, len(self._answered)))]  # fmt: skip
            by_step: dict[stages.Step, list[JobRecord]] = {}
            for step, record in batch:
                by_step.setdefault(step, []).append(record)
            for step, records in by_step.items():
                self._past_model(step, records)

    def _past_model(self, step: stages.Step, records: list[JobRecord]) -> None:
        """Jobs past the model's step: its link's leave, then the links after it, to their
        rows (on a pool thread)."""
        try:
            sent: list[tuple[keys.Stage, list[JobRecord]]] = []
            if stages.after(step) is None:
                raise RuntimeError("the model's link is the last: nothing writes the row")
            flow.leave(step, records, [], self._svc, lambda s, rs: sent.append((s, rs)))
            rest, _ = self._walk(sent)
            if rest is not None:
                raise RuntimeError("a second model link: the in-process runner runs one")
        except Exception as exc:
            if self._stopping:
                return
            log.debug("%d job(s) failed unexpectedly (%s: %s)", len(records),
                      type(exc).__name__, exc, exc_info=True)  # their rows log it (flow)
            self._error_rows(records, exc)

    def _error_rows(self, records: list[JobRecord], exc: Exception) -> None:
        """Last resort: each job's row carries ``exc`` (the flow's internal error rows).

        The records are cut back to their jobs, since what broke may be in a part they
        gained later (their evidence, answer or verification). The write is set-if-absent:
        a job that already has its row keeps it. No broker redelivers here, so a row that
        cannot be stored is logged and the run goes on.
        """
        for record in records:
            bare = flow.bare(record)
            try:
                flow.internal_error_row(bare.model_dump(mode="json"), self._svc, exc)
            except Exception:
                log.exception("could not write the error row of job %s", record.job.job_id)

    def _pool_or_fail(self) -> ThreadPoolExecutor:
        assert self._pool is not None, "InProcessRunner.run is not running"
        return self._pool


def _answered(step: stages.Step, record: JobRecord, t0: float, future: Future[Any]) -> JobRecord:
    """The record with the gateway's answer or failure (the step's ``settle``); a bug
    recording it is its error."""
    settle = step.settle
    assert settle is not None  # a model step declares both halves (stages.CHAIN's check)
    try:
        return settle(record, _result(future), t0)
    except Exception as exc:
        return flow.failed(record, exc)


def _result(future: Future[Any]) -> Any:
    try:
        result = future.result()
    except ServiceError as exc:
        return exc
    if isinstance(result, list):  # generate_many's list of one
        (result,) = result
    return result


class _Held:
    """The jobs of a bundle that ``_retrieve`` still answers for: each holds one slot,
    and nothing else will write its row. Each leaves once, by ``release`` (its slot
    freed) or ``hand_over`` (the slot goes with the job): no slot is freed twice."""

    def __init__(self, jobs: list[Job], slots: threading.Semaphore):
        self._jobs = {job.job_id: job for job in jobs}
        self._left = Counter(job.job_id for job in jobs)
        self._slots = slots

    def jobs(self) -> list[Job]:
        return [self._jobs[job_id] for job_id in self._left.elements()]

    def hand_over(self, job_id: str) -> bool:
        if self._left[job_id] <= 0:
            return False
        self._left[job_id] -= 1
        if not self._left[job_id]:
            del self._left[job_id]
        return True

    def release(self, job_id: str) -> None:
        if self.hand_over(job_id):
            self._slots.release()

    def release_all(self, keep: Iterable[str] = ()) -> None:
        """Free every job still held but (once per occurrence) those in ``keep``."""
        for job_id in (Counter(self._left) - Counter(keep)).elements():
            self.release(job_id)
