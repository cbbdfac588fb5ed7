"""The in-process runner takes answered jobs past the model in batches: one entry check
and one row write for the jobs answered meanwhile, as a verify worker does a bundle."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future

import pytest

from qfarm.common.models import Generation
from qfarm.worker import runner as runner_module
from qfarm.worker.runner import InProcessRunner

pytestmark = pytest.mark.timeout(120)

QUESTIONS = tuple(f"What is the capital of country number {i}?" for i in range(12))
N = 4


class HeldGateway:
    """Answers every request at once when ``release`` is called (a burst of answers)."""

    def __init__(self) -> None:
        self.futures: list[Future] = []
        self.lock = threading.Lock()

    def submit_many(self, items: list) -> list[Future]:
        made = [Future() for _ in items]
        with self.lock:
            self.futures += made
        return made

    def release(self) -> None:
        with self.lock:
            pending, self.futures = self.futures, []
        for future in pending:
            future.set_result(Generation(text='"Paris is the capital" [E1]', endpoint="canned"))

    def close(self) -> None:
        self.release()


def counted_writes(svc, monkeypatch) -> list[int]:
    """The size of each row write the store takes from now on."""
    writes: list[int] = []
    real_write = svc.store.write_rows

    def counting(rows, *args, **kwargs):
        if rows:
            writes.append(len(rows))
        return real_write(rows, *args, **kwargs)

    monkeypatch.setattr(svc.store, "write_rows", counting)
    return writes


def test_answers_that_arrive_together_are_verified_and_written_together(eager_run, monkeypatch):
    gateway = HeldGateway()
    svc, store, jobs = eager_run(gateway, QUESTIONS, N)
    writes = counted_writes(svc, monkeypatch)
    runner = InProcessRunner(svc, max_inflight=len(jobs), bundle_size=N)
    done = threading.Event()

    def release_when_all_asked() -> None:
        while len(gateway.futures) < len(jobs) and not done.is_set():
            time.sleep(0.01)
        gateway.release()

    threading.Thread(target=release_when_all_asked, daemon=True).start()
    runner.run(jobs)
    done.set()
    rows = [json.loads(raw) for raw in store.read_rows("r", 0)]
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)  # one row each
    assert not [r for r in rows if r["error"]]
    assert sum(writes) == len(jobs)
    assert len(writes) < len(jobs) / 4, writes  # 48 jobs answered at once: a few batches
    assert max(writes) <= runner_module.PAST_MODEL_BATCH


class TricklingGateway:
    """Answers on its own asyncio loop, one request every ``gap_s``, as an endpoint whose
    answers come slower than the runner takes them past the model."""

    def __init__(self, gap_s: float) -> None:
        import asyncio

        self.gap_s = gap_s
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue[Future | None] = asyncio.Queue()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self._answer(), self.loop)

    async def _answer(self) -> None:
        import asyncio

        while True:
            future = await self.queue.get()
            if future is None:  # closed
                return
            await asyncio.sleep(self.gap_s)
            future.set_result(Generation(text='"Paris is the capital" [E1]', endpoint="canned"))

    def submit_many(self, items: list) -> list[Future]:
        made = [Future() for _ in items]
        for future in made:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, future)
        return made

    def close(self) -> None:  # the test, then the run's services: once
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)
        self.task.result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def test_answers_that_trickle_in_still_go_past_the_model_in_batches(eager_run, monkeypatch):
    # One answer every 2 ms: a drain of one job takes less than that, so without waiting
    # for others each answer would be its own batch and its own row write.
    gateway = TricklingGateway(gap_s=0.002)
    svc, store, jobs = eager_run(gateway, QUESTIONS, N)
    writes = counted_writes(svc, monkeypatch)
    try:
        InProcessRunner(svc, max_inflight=len(jobs), bundle_size=N).run(jobs)
    finally:
        gateway.close()
    rows = [json.loads(raw) for raw in store.read_rows("r", 0)]
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)  # one row each
    assert not [r for r in rows if r["error"]]
    assert sum(writes) == len(jobs)
    # 48 answers over about 0.1 s, gathered PAST_MODEL_WAIT_S (20 ms) at a time.
    assert len(writes) <= len(jobs) / 4, writes
