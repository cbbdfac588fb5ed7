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
* at most ``max_inflight`` jobs are between admission and the end of their
  LLM call (the sum of the endpoints' in-flight caps), so the gateway always
  has work and never a crowd of waiters, and a row is written as each job
  ends.

Rows are the serial path's rows (same stage code, same store, same row
script); only timings, and so the order of rows, differ. The serial path
stays for debugging (``--serial``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from common import keys
from common.errors import ServiceError
from common.jobs import ref_for
from common.models import Generation, Job, JobRecord
from worker import flow, pipeline
from worker.services import Services

log = logging.getLogger("qfarm.worker")

# Threads for retrieval and verification: they hold the GIL most of the time, so more
# would not add CPU; two let SQLite's searches (which release it) overlap the rest.
CPU_THREADS = 2


class InProcessRunner:
    """Runs jobs of runs whose manifests are in ``svc.store``; one ``run`` at a time."""

    def __init__(self, svc: Services, *, max_inflight: int, cpu_threads: int = CPU_THREADS):
        self._svc = svc
        self._max_inflight = max(1, max_inflight)
        self._cpu_threads = max(1, cpu_threads)
        self._slots = threading.Semaphore(self._max_inflight)
        self._pool: ThreadPoolExecutor | None = None
        self._errors: list[BaseException] = []

    def run(self, jobs: Iterable[Job], *, tick: Callable[[], None] | None = None,
            tick_s: float = 0.25) -> None:  # fmt: skip
        """Every job to its row; ``tick`` is called about every ``tick_s`` seconds (progress)."""
        tick = tick or (lambda: None)
        last = time.monotonic()
        self._pool = ThreadPoolExecutor(self._cpu_threads, thread_name_prefix="qfarm-eager")
        try:
            for job in jobs:
                while not self._slots.acquire(timeout=tick_s):
                    tick()
                    last = time.monotonic()
                self._pool.submit(self._retrieve, job.model_copy(update={"enqueued_at": time.time()}))
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

    def _retrieve(self, job: Job) -> None:
        forwarded: list[JobRecord] = []

        def send(stage: keys.Stage, records: list[JobRecord]) -> None:
            assert stage == keys.GENERATE
            forwarded.extend(records)

        ref = ref_for(job).model_dump(mode="json", exclude_none=True)
        try:
            flow.handle_retrieve([ref], self._svc, send)
        except Exception as exc:  # the serial path's _guarded: a bug is the job's error row
            log.error("job %s failed unexpectedly (%s: %s)", job.job_id, type(exc).__name__, exc)
            flow.internal_error_rows([ref], self._svc, exc)
        records = flow.enter_generate(forwarded, self._svc) if forwarded else []
        if not records:
            self._slots.release()  # ended here (row written, or skipped)
            return
        (record,) = records
        request = pipeline.generation_request(record)
        if request is None:
            self._submit(self._verify, record)
            self._slots.release()
            return
        prompt, sampling, job_id = request
        t0 = time.perf_counter()
        gateway = self._svc.gateway
        submit = getattr(gateway, "submit", None)
        future: Future[Generation | ServiceError]
        if submit is not None:
            future = submit(prompt, sampling, job_id=job_id)
        else:  # a gateway without futures (tests' canned ones): a pool thread waits instead
            future = self._pool_or_fail().submit(lambda: gateway.generate_many([request])[0])
        future.add_done_callback(lambda f: self._generated(record, t0, f))

    def _generated(
        self, record: JobRecord, t0: float, future: Future[Generation | ServiceError]
    ) -> None:
        """On the gateway's loop: queue the verification, free the slot. Nothing slow here."""
        try:
            try:
                record = pipeline.with_generation(record, future.result(), t0)
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
