"""The blocking face of a gateway: threads hand prompts to its event loop and get
``concurrent.futures.Future``s back."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Future

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Generation, Sampling
from qfarm.worker.llm.dispatch import Dispatcher
from qfarm.worker.llm.transport import EventLoopThread


class ThreadBridge:
    """Starts prompts from any thread as requests on the dispatcher's loop."""

    def __init__(self, loop: EventLoopThread, dispatcher: Dispatcher):
        self._loop = loop
        self._dispatch = dispatcher
        self.closed = False  # set by the gateway's close: later prompts fail at once

    def submit_many(self, items: list[tuple[str, Sampling, str]]) -> list[Future[Generation]]:
        """Futures of many prompts, started with one wake-up of the loop (waking it costs a
        write to its self-pipe: per prompt, a tenth of an eager run's CPU)."""
        if self._loop.in_loop():
            raise RuntimeError("submit was called on the gateway's event loop; use agenerate")
        futures: list[Future[Generation]] = [Future() for _ in items]
        pairs = list(zip(items, futures, strict=True))
        if self.closed or not self._loop.call_soon(self._start_many, pairs):
            for f in futures:
                f.set_exception(TransientServiceError("the LLM gateway is closed"))
        return futures

    def _start_many(
        self, pairs: list[tuple[tuple[str, Sampling, str], Future[Generation]]]
    ) -> None:
        loop = asyncio.get_running_loop()
        for (prompt, sampling, job_id), future in pairs:
            if not future.set_running_or_notify_cancel():
                continue  # the caller cancelled it meanwhile
            task = loop.create_task(self._dispatch.tracked(
                self._dispatch.agenerate(prompt, sampling, job_id=job_id)
            ))
            task.add_done_callback(functools.partial(_settle, future))


def _settle(future: Future[Generation], task: asyncio.Task[Generation]) -> None:
    """Hand a task's outcome to the caller's future (the caller may be on any thread)."""
    if task.cancelled():
        future.set_exception(TransientServiceError("the LLM gateway is closed"))
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())
