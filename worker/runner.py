"""The in-process runner: a run's jobs through the same stages as the farm, concurrently.

Eager runs (``qfarm sweep --eager``, ``qfarm ask --eager``, ``run_sweep(...,
eager=True)``) have no broker and no workers, but the GPU still wants
``QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT`` requests in flight per endpoint. So:

* the CPU stages run in a small thread pool, through the queue handlers'
  own functions: ``flow.handle_retrieve`` (entry check, preflight, cache,
  retrieval, prompt; rows for jobs that end there) and ``flow.verify_and_write``
  (verification, sidecar, the row write);
* the LLM call is handed to the async gateway without blocking a thread
  (``Gateway.submit``); its completion queues the job's verification;
* at most twice ``max_inflight`` (the sum of the endpoints' in-flight caps)
  jobs are between admission and the end of their LLM call: the gateway
  keeps its cap in flight and the rest queued, and a row is written as each
  job ends.

Rows are the serial path's rows (same stage code, same store, same row
script); only timings, and so the order of rows, differ. The serial path
stays for debugging (``--serial``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from common import keys
from common.errors import ServiceError
from common.jobs import bundles, ref_for
from common.models import Job, JobRecord
from worker import flow, pipeline
from worker.services import Services

log = logging.getLogger("qfarm.worker")

# Threads for retrieval and verification: they hold the GIL most of the time, so more
# would not add CPU; two let SQLite's searches (which release it) overlap the rest.
CPU_THREADS = 2


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

    def run(self, jobs: Iterable[Job], *, tick: Callable[[], None] | None = None,
            tick_s: float = 0.25) -> None:  # fmt: skip
        """Every job to its row; ``tick`` is called about every ``tick_s`` seconds (progress)."""
        tick = tick or (lambda: None)
        last = time.monotonic()
        self._pool = ThreadPoolExecutor(self._cpu_threads, thread_name_prefix="qfarm-eager")
        try:
            for bundle in bundles(jobs, self._bundle_size):
                for _ in bundle:
                    while not self._slots.acquire(timeout=tick_s):
                        tick()
                        last = time.monotonic()
                now = time.time()
                self._pool.submit(
                    self._retrieve, [job.model_copy(update={"enqueued_at": now}) for job in bundle]
                )
                if time.monotonic() - last >= tick_s:
                    tick()
                    last = time.monotonic()
            # Every slot back: every job has left its LLM call (its verification is queued).
            for _ in range(self._max_inflight):
                while not self._slots.acquire(timeout=tick_s):
                    tick()
            self._pool.shutdown(wait=True)
        except BaseException:
            self._pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            for _ in range(self._max_inflight):
                self._slots.release()
        tick()

    # ------------------------------------------------------------------ stages

    def _retrieve(self, jobs: list[Job]) -> None:
        """A bundle's first stage (one search per distinct question), then its prompts go
        to the gateway in one hand-over."""
        forwarded: list[JobRecord] = []

        def send(stage: keys.Stage, records: list[JobRecord]) -> None:
            assert stage == keys.GENERATE
            forwarded.extend(records)

        refs = [ref_for(job).model_dump(mode="json", exclude_none=True) for job in jobs]
        try:
            flow.handle_retrieve(refs, self._svc, send)
        except Exception as exc:  # the serial path's _guarded: a bug is the jobs' error rows
            log.error("bundle failed unexpectedly (%s: %s)", type(exc).__name__, exc)
            flow.internal_error_rows(refs, self._svc, exc)
        records = flow.enter_generate(forwarded, self._svc) if forwarded else []
        asks = [(r, pipeline.generation_request(r)) for r in records]
        sent = [(r, req) for r, req in asks if req is not None]
        for record, req in asks:
            if req is None:
                self._submit(self._verify, record)
        for _ in range(len(jobs) - len(sent)):
            self._slots.release()  # ended here (row written, skipped, or nothing to ask)
        if not sent:
            return
        t0 = time.perf_counter()
        requests = [req for _, req in sent if req is not None]
        gateway = self._svc.gateway
        submit_many = getattr(gateway, "submit_many", None)
        futures: list[Future[Any]]
        if submit_many is not None:
            futures = submit_many(requests)
        else:  # a gateway without futures (tests' canned ones): a pool thread waits instead
            pool = self._pool_or_fail()
            futures = [pool.submit(gateway.generate_many, [r]) for r in requests]
        for (record, _), future in zip(sent, futures, strict=True):
            future.add_done_callback(functools.partial(self._generated, record, t0))

    def _generated(self, record: JobRecord, t0: float, future: Future[Any]) -> None:
        """On the gateway's loop: queue the verification, free the slot. Nothing slow here."""
        try:
            try:
                result = future.result()
                if isinstance(result, list):  # generate_many's list of one
                    (result,) = result
                record = pipeline.with_generation(record, result, t0)
            except ServiceError as exc:
                record = pipeline.with_generation(record, exc, t0)
            except Exception as exc:
                record = flow.failed(record, exc)
            self._submit(self._verify, record)
        finally:
            self._slots.release()

    def _verify(self, record: JobRecord) -> None:
        try:
            flow.verify_and_write([record], self._svc)
        except Exception as exc:
            log.error("job %s failed unexpectedly (%s: %s)", record.job.job_id,
                      type(exc).__name__, exc)  # fmt: skip
            flow.internal_error_rows([record.model_dump(mode="json")], self._svc, exc)

    def _submit(self, fn: Callable[[JobRecord], None], record: JobRecord) -> None:
        self._pool_or_fail().submit(fn, record)

    def _pool_or_fail(self) -> ThreadPoolExecutor:
        assert self._pool is not None, "InProcessRunner.run is not running"
        return self._pool
