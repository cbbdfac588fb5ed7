"""The blocking face of a gateway: threads hand prompts to its event loop and get
``concurrent.futures.Future``s back (one per prompt, also for the samples a shared request
answers together: ``qfarm.common.sharing``)."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Future
from typing import Any

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Generation, Sampling
from qfarm.common.sharing import share_groups
from qfarm.worker.llm.dispatch import Dispatcher
from qfarm.worker.llm.transport import EventLoopThread


class ThreadBridge:
    """Starts prompts from any thread as requests on the dispatcher's loop."""

    def __init__(self, loop: EventLoopThread, dispatcher: Dispatcher):
        self._loop = loop
        self._dispatch = dispatcher
        self.closed = False  # set by the gateway's close: later prompts fail at once
        # The task behind each started future, so a caller can abandon it (``cancel_many``);
        # only read and written on the loop's thread.
        # A shared request's task answers several futures (a list of Generations).
        self._tasks: dict[Future[Generation], asyncio.Task[Any]] = {}

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
        for group in share_groups([item for item, _ in pairs]):
            if len(group) > 1:
                self._start_shared([pairs[i] for i in group], loop)
                continue
            (prompt, sampling, job_id), future = pairs[group[0]]
            if not future.set_running_or_notify_cancel():
                continue  # the caller cancelled it meanwhile
            task = loop.create_task(self._dispatch.tracked(
                self._dispatch.agenerate(prompt, sampling, job_id=job_id)
            ))
            self._tasks[future] = task
            task.add_done_callback(functools.partial(_settle, future))
            task.add_done_callback(functools.partial(self._forget, future))

    def _start_shared(
        self,
        pairs: list[tuple[tuple[str, Sampling, str], Future[Generation]]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """One request for a group of samples (seed order); each future gets its choice. A
        sample its caller cancelled meanwhile is still asked for (its choice is dropped),
        so the others keep the seeds and choices they would have had."""
        live = [future.set_running_or_notify_cancel() for _, future in pairs]
        if not any(live):
            return
        (prompt, sampling, _), _ = pairs[0]
        job_ids = [job_id for (_, _, job_id), _ in pairs]
        task = loop.create_task(self._dispatch.tracked(
            self._dispatch.agenerate_shared(prompt, sampling, job_ids)
        ))
        for (_, future), running in zip(pairs, live, strict=True):
            if running:
                self._tasks[future] = task
                task.add_done_callback(functools.partial(self._forget, future))
        task.add_done_callback(functools.partial(
            _settle_shared, [future if running else None
                             for (_, future), running in zip(pairs, live, strict=True)]
        ))

    def _forget(self, future: Future[Generation], _task: asyncio.Task[Any]) -> None:
        self._tasks.pop(future, None)

    def cancel_many(self, futures: list[Future[Generation]]) -> None:
        """Abandon these prompts: one not started yet never is, one waiting for an endpoint
        or in flight is cancelled (its HTTP request closed, its slot given back). Each
        future then fails with a ``TransientServiceError``; one already answered keeps
        its answer."""
        started = [f for f in futures if not f.cancel() and not f.done()]
        if started:
            self._loop.call_soon(self._cancel_tasks, started)

    def _cancel_tasks(self, futures: list[Future[Generation]]) -> None:
        for future in futures:
            task = self._tasks.get(future)
            if task is not None:
                task.cancel()


def _settle(future: Future[Generation], task: asyncio.Task[Generation]) -> None:
    """Hand a task's outcome to the caller's future (the caller may be on any thread)."""
    if task.cancelled():
        future.set_exception(TransientServiceError("the LLM gateway is closed"))
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())


def _settle_shared(
    futures: list[Future[Generation] | None], task: asyncio.Task[list[Generation]]
) -> None:
    """A shared request's outcome to each of its samples' futures (None: cancelled before
    it started): choice j to the j-th, or the one failure to every one of them."""
    failure: BaseException | None = None
    if task.cancelled():
        failure = TransientServiceError("the LLM gateway is closed")
    else:
        failure = task.exception()
    for j, future in enumerate(futures):
        if future is None or future.done():
            continue
        if failure is not None:
            future.set_exception(failure)
        else:
            future.set_result(task.result()[j])
