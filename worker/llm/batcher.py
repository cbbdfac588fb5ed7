"""Optional micro-batcher: prompts with identical sampling share one ``/v1/completions`` call.

Callers submit one prompt and get a ``Future``. A background thread groups
pending prompts by ``batch_key`` and hands a group to ``dispatch`` (on an
executor) when it holds ``max_batch`` prompts or its oldest prompt has waited
``max_wait_s``. ``dispatch`` must resolve every future of the group; if it
raises, the remaining futures get that exception, so no caller waits forever.

Only prompts whose requests would be identical apart from the prompt can
share a request: the seed is a request-level parameter in vLLM, so with a
per-job seed and temperature > 0 every job is its own group (batches of one).
At temperature 0 the seed does not change the output and is left out of the
key. An answer grammar (structured output) is request-level too: only prompts of
one grammar share a request. Measured on the simulator (bench/perf/saturation.py),
batching does not beat in-flight concurrency, so it is off by default
(``QFARM_LLM_BATCH_SIZE=0``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Generation, Sampling


def batch_key(sampling: Sampling) -> str:
    """Requests with equal keys differ only in their prompts."""
    data = sampling.model_dump(mode="json")
    if sampling.temperature <= 0:
        data.pop("seed")
    return json.dumps(data, sort_keys=True)


@dataclass
class BatchItem:
    prompt: str
    sampling: Sampling
    job_id: str
    started: float = field(default_factory=time.perf_counter)
    future: Future[Generation] = field(default_factory=Future)


class MicroBatcher:
    def __init__(
        self,
        dispatch: Callable[[list[BatchItem]], None],
        *,
        max_batch: int,
        max_wait_s: float,
        executor: Executor,
    ):
        self._dispatch = dispatch
        self.max_batch = max(1, max_batch)
        self.max_wait_s = max(0.0, max_wait_s)
        self._executor = executor
        self._groups: dict[str, list[BatchItem]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.batches_sent = 0
        self.prompts_sent = 0
        self._thread = threading.Thread(target=self._loop, name="qfarm-llm-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: str, sampling: Sampling, job_id: str) -> Future[Generation]:
        item = BatchItem(prompt, sampling, job_id)
        with self._cond:
            if self._closed:
                item.future.set_exception(
                    TransientServiceError("the LLM gateway is closed", job_id=job_id)
                )
                return item.future
            group = self._groups.setdefault(batch_key(sampling), [])
            group.append(item)
            if len(group) == 1 or len(group) >= self.max_batch:
                self._cond.notify()
        return item.future

    def mean_batch_size(self) -> float:
        return self.prompts_sent / self.batches_sent if self.batches_sent else 0.0

    def _take_ready(
        self, now: float, flush_all: bool
    ) -> tuple[list[list[BatchItem]], float | None]:
        """Groups due now, and the seconds until the next one is due."""
        ready: list[list[BatchItem]] = []
        next_due: float | None = None
        for key in list(self._groups):
            group = self._groups[key]
            while len(group) >= self.max_batch:
                ready.append(group[: self.max_batch])
                del group[: self.max_batch]
            if group:
                due = group[0].started + self.max_wait_s
                if flush_all or due <= now:
                    ready.append(list(group))
                    group.clear()
                else:
                    next_due = due - now if next_due is None else min(next_due, due - now)
            if not group:
                del self._groups[key]
        return ready, next_due

    def _loop(self) -> None:
        while True:
            with self._cond:
                ready, next_due = self._take_ready(time.perf_counter(), self._closed)
                if not ready:
                    if self._closed:
                        return
                    self._cond.wait(timeout=next_due)
                    continue
            for group in ready:
                self.batches_sent += 1
                self.prompts_sent += len(group)
                self._executor.submit(self._run, group)

    def _run(self, group: list[BatchItem]) -> None:
        try:
            self._dispatch(group)
        except BaseException as exc:  # every caller must be released
            for item in group:
                if not item.future.done():
                    item.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    def close(self) -> None:
        """Flush what is pending, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5.0)
