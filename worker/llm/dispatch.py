"""Dispatch and admission: every request of a gateway as a coroutine on its loop, admitted
to a slot of an endpoint (interactive requests first, then in arrival order:
``admission.py``), through the one retry loop (failover, backoff, back-pressure), alone or
in a micro-batch."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from qfarm.common.backoff import RetryPolicy, compute_backoff
from qfarm.common.errors import (
    PermanentServiceError,
    QueueFullError,
    ServiceError,
    TransientServiceError,
    UnfinishedChoiceError,
)
from qfarm.common.logs import job_fields
from qfarm.common.models import Generation, Sampling, Usage
from qfarm.common.settings import Settings
from qfarm.worker import metrics
from qfarm.worker.llm.admission import Admission
from qfarm.worker.llm.balancer import EndpointState, home_key
from qfarm.worker.llm.batcher import BatchItem, MicroBatcher
from qfarm.worker.llm.client import FINISHED_OK, VLLM, Choice, Reply
from qfarm.worker.llm.pool import EndpointPool
from qfarm.worker.llm.replies import fit_context, split_shared_usage, split_usage, to_generation
from qfarm.worker.llm.response_cache import ResponseCache

log = logging.getLogger("qfarm.llm")
T = TypeVar("T")

# vLLM refuses more prompts per /v1/completions request (VLLM_MAX_COMPLETION_PROMPTS).
MAX_COMPLETION_PROMPTS = 1024


class _InlineExecutor(Executor):
    """Runs a callable at once in the caller's thread: the batcher's dispatch only
    schedules a coroutine on the loop, so it needs no thread of its own."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class Dispatcher:
    """Admits, sends and retries a gateway's requests; runs on the pool's loop only.

    ``agenerate`` is the async face: one prompt's answer, through the micro-batcher when
    ``llm_batch_size`` > 1. ``tracked`` makes a coroutine a request ``drain`` waits for.
    """

    def __init__(self, pool: EndpointPool, settings: Settings, rng: random.Random | None = None,
                 response_cache: ResponseCache | None = None):
        self._client = pool.client
        # Answers requests of runs with --cache that were asked before (response_cache.py).
        self._cache = response_cache
        self._balancer = pool.balancer
        self._loop = pool.loop
        # Coroutines waiting for an endpoint, by class (interactive or not); woken (all,
        # interactive ones first) whenever the balancer's state changes, like the threads of
        # a Condition.notify_all. Touched on the loop only.
        self._waiters: dict[bool, list[asyncio.Future[None]]] = {True: [], False: []}
        self._balancer.on_change = self._on_change
        self._tasks: set[asyncio.Task[Any]] = set()
        # One permit per slot of every endpoint, taken before the balancer is asked: queued
        # requests wait here, interactive ones first, and a finished request wakes exactly
        # one of them. Sweep requests leave each endpoint's interactive reserve free.
        # Single-prompt requests only: a batch takes its slots from the balancer directly.
        self._permits = Admission(pool.slots, pool.sweep_slots)
        self._policy = RetryPolicy(
            max_attempts=max(1, settings.llm_max_attempts),
            base_s=settings.llm_backoff_base_s,
            max_s=settings.llm_backoff_max_s,
        )
        self._rng = rng or random.Random()
        self._stream = settings.llm_stream
        self._wait_s = settings.llm_wait_for_endpoint_s
        self._batcher: MicroBatcher | None = None

    def start_batching(self, settings: Settings) -> None:
        """Micro-batch prompts when ``llm_batch_size`` > 1 (starts the batcher's thread)."""
        batch_size = settings.llm_batch_size  # at most MAX_COMPLETION_PROMPTS (settings)
        if batch_size > 1:
            self._batcher = MicroBatcher(
                self._schedule_batch,
                max_batch=batch_size,
                max_wait_s=settings.llm_batch_wait_ms / 1000.0,
                executor=_InlineExecutor(),
            )

    def stop_batching(self) -> None:
        if self._batcher is not None:
            self._batcher.close()

    async def agenerate(self, prompt: str, sampling: Sampling, *, job_id: str) -> Generation:
        """The coroutine behind ``generate``; runs on the gateway's loop only."""
        if sampling.n != 1:
            sampling = sampling.model_copy(update={"n": 1})  # one Generation per job
        # A cached request goes alone: the cache answers it by itself, and a batch's reply
        # is keyed as one body of many prompts, which no job asks again.
        if self._batcher is not None and not (sampling.cache and self._cache is not None):
            return await asyncio.wrap_future(self._batcher.submit(prompt, sampling, job_id))
        return await self._run(prompt, sampling, job_id, time.perf_counter())

    def batch_stats(self) -> dict[str, float]:
        if self._batcher is None:
            return {"batches": 0, "mean_batch_size": 0.0}
        return {
            "batches": self._batcher.batches_sent,
            "mean_batch_size": self._batcher.mean_batch_size(),
        }

    async def tracked(self, coro: Coroutine[Any, Any, T]) -> T:
        """Every top-level request is a task ``close`` can wait for (or end, cleanly)."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            return await coro
        except asyncio.CancelledError:
            raise TransientServiceError("the LLM gateway is closed") from None
        finally:
            self._tasks.discard(task)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, grace_s: float) -> None:
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current]
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1.0)

    def _on_change(self) -> None:
        self._loop.call_soon(self._wake)

    def _wake(self) -> None:
        waiters = [*self._waiters[True], *self._waiters[False]]
        self._waiters = {True: [], False: []}
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _observe_attempt(
        self, ep: EndpointState, seconds: float, error: ServiceError | None
    ) -> None:
        """The one place where an HTTP attempt's outcome is known (endpoint, duration,
        error or None): counted for /metrics (worker/metrics.py)."""
        metrics.observe_request(ep.target.display, seconds, error)

    def _observe_endpoint(self, ep: EndpointState) -> None:
        """Called after every release: ``ep.outstanding`` (in flight) and ``ep.breaker``
        are current here, for gauges."""

    async def _attempt(
        self, ep: EndpointState, prompts: list[str], sampling: Sampling, *, stream: bool,
        job_id: str,
    ) -> Reply:  # fmt: skip
        """One HTTP request to ``ep``, observed."""
        t0 = time.perf_counter()
        try:
            reply = await self._client.acomplete(
                ep.target, prompts, sampling, stream=stream, job_id=job_id
            )
        except ServiceError as exc:
            self._observe_attempt(ep, time.perf_counter() - t0, exc)
            raise
        self._observe_attempt(ep, time.perf_counter() - t0, None)
        return reply

    def _release(
        self,
        ep: EndpointState,
        interactive: bool,
        *,
        ok: bool,
        error: ServiceError | None = None,
        cost: int = 1,
    ) -> None:
        self._balancer.release(ep, ok=ok, error=error, cost=cost)
        if cost == 1:
            self._permits.release(interactive)
        self._observe_endpoint(ep)

    def _cancel(self, ep: EndpointState, interactive: bool, cost: int = 1) -> None:
        """Give a slot back without an outcome (cancelled while closing, or a bug)."""
        self._balancer.cancel(ep, cost=cost)
        if cost == 1:
            self._permits.release(interactive)

    async def _run(
        self,
        prompt: str,
        sampling: Sampling,
        job_id: str,
        started: float,
        attempts: int = 0,
        tried: list[str] | None = None,
        last: ServiceError | None = None,
    ) -> Generation:
        (gen,) = await self._run_group(prompt, sampling, [job_id], started, attempts, tried, last)
        return gen

    async def agenerate_shared(
        self, prompt: str, sampling: Sampling, job_ids: list[str]
    ) -> list[Generation]:
        """The samples of one prompt (``qfarm.common.sharing.share_groups``: ``sampling.seed``
        the first's, each next one's seed one higher) in one request with ``n`` choices;
        choice j is ``job_ids[j]``'s answer. On the gateway's loop only."""
        sampling = sampling.model_copy(update={"n": 1})
        return await self._run_group(prompt, sampling, job_ids, time.perf_counter())

    async def _send_group(
        self, ep: EndpointState, prompt: str, sent: Sampling, job_ids: list[str]
    ) -> list[tuple[Choice, Reply, Usage]]:
        """One attempt for a group: each job's choice, the reply it came in and its usage.

        vLLM takes the group as one request with ``n`` choices (the prompt prefilled once);
        a server without ``n`` (llama.cpp's) gets one request per job with that job's seed,
        back to back on this endpoint, whose prefix cache then holds the prompt. Either way
        a missing or unfinished choice fails the whole attempt: the group is retried as one.
        """
        job_id = job_ids[0]
        if len(job_ids) == 1:
            reply = await self._attempt(ep, [prompt], sent, stream=self._stream, job_id=job_id)
            return [(self._usable_choice(reply, ep, job_id, 0), reply, reply.usage)]
        if ep.target.dialect != VLLM:
            out = []
            for j, jid in enumerate(job_ids):
                one = sent.model_copy(update={"seed": sent.seed + j})
                reply = await self._attempt(ep, [prompt], one, stream=self._stream, job_id=jid)
                out.append((self._usable_choice(reply, ep, jid, 0), reply, reply.usage))
            return out
        many = sent.model_copy(update={"n": len(job_ids)})
        reply = await self._attempt(ep, [prompt], many, stream=False, job_id=job_id)
        choices = [self._usable_choice(reply, ep, jid, j) for j, jid in enumerate(job_ids)]
        shares = split_shared_usage(reply.usage, [c.text for c in choices], prompt)
        return [(c, reply, u) for c, u in zip(choices, shares, strict=True)]

    async def _run_group(
        self,
        prompt: str,
        sampling: Sampling,
        job_ids: list[str],
        started: float,
        attempts: int = 0,
        tried: list[str] | None = None,
        last: ServiceError | None = None,
    ) -> list[Generation]:
        """The one retry loop, for one job or a shared group (one unit: every job of it gets
        its answer from the same attempt, or all fail together)."""
        tried = list(tried or [])
        interactive = sampling.interactive
        job_id = job_ids[0]
        home = home_key(prompt) if self._balancer.affinity_slack else None
        cache = self._cache if sampling.cache else None
        if cache is not None and attempts == 0:
            cached = await cache.answer(self._balancer.endpoints, prompt, sampling,
                                              len(job_ids), started)
            if cached is not None:
                return cached
        # Back-pressure (vLLM's queue-full 503) is a wait, not a failure: those retries do not
        # use up the attempt budget, for up to llm_wait_for_endpoint_s after the first one.
        uncharged = overloads = 0
        pressed_since: float | None = None
        while attempts - uncharged < self._policy.max_attempts:
            if attempts and not self._balancer.has_available(avoid=tried, interactive=interactive):
                await asyncio.sleep(compute_backoff(attempts, self._policy, self._rng))
            ep = await self._acquire(tried, job_id, attempts, last, interactive, home=home)
            attempts += 1
            tried.append(ep.url)
            sent = fit_context(prompt, sampling, ep.max_model_len)
            try:
                answers = await self._send_group(ep, prompt, sent, job_ids)
            except PermanentServiceError as exc:
                self._release(ep, interactive, ok=True)  # the server answered: it is alive
                exc.attempts = attempts
                raise
            except TransientServiceError as exc:
                if isinstance(exc, QueueFullError):
                    overloads += 1
                    pressed_since = pressed_since or time.monotonic()
                    if time.monotonic() - pressed_since < self._wait_s:
                        uncharged += 1
                    if exc.retry_after_s is None:  # vLLM sends none: hold the endpoint briefly
                        exc.retry_after_s = compute_backoff(overloads, self._policy, self._rng)
                self._release(ep, interactive, ok=False, error=exc)
                last = exc
                # Not the job's end (it is retried): the job's error row, if it comes to
                # that, is the one warning (worker/flow.py, log_error_row).
                log.info("job %s: attempt %d failed: %s", job_id, attempts, exc,
                         extra=job_fields(job_id=job_id, endpoint=ep.target.display))
                continue
            except BaseException:
                self._cancel(ep, interactive)  # cancelled (closing) or a bug: give the slot back
                raise
            self._release(ep, interactive, ok=True)
            # One reply for the group (n choices): its time is shared among them, as a
            # micro-batch's among its prompts (the cost table's model seconds).
            one_reply = len(answers) > 1 and answers[0][1] is answers[-1][1]
            gens = [
                to_generation(
                    choice, reply, ep, attempts, started, usage, sampling.max_tokens, sent,
                    prompt, prompts=len(answers) if one_reply else 1,
                )
                for choice, reply, usage in answers
            ]
            if cache is not None:
                gens = await cache.keep(ep, prompt, sent, gens)
            return gens
        assert last is not None
        raise TransientServiceError(
            f"gave up after {attempts} attempts; last error: {last}",
            endpoint=last.endpoint,
            job_id=job_id,
            attempts=attempts,
        )

    async def _acquire(
        self,
        tried: list[str],
        job_id: str,
        attempts: int,
        last: ServiceError | None,
        interactive: bool,
        cost: int = 1,
        home: str | None = None,
    ) -> EndpointState:
        """``Balancer.acquire`` for the loop: waits on a future, never blocks the thread."""
        if cost == 1:
            await self._permits.acquire(interactive)
        try:
            return await self._acquire_endpoint(
                tried, job_id, attempts, last, interactive, cost, home
            )
        except BaseException:
            if cost == 1:
                self._permits.release(interactive)
            raise

    async def _acquire_endpoint(
        self,
        tried: list[str],
        job_id: str,
        attempts: int,
        last: ServiceError | None,
        interactive: bool,
        cost: int,
        home: str | None,
    ) -> EndpointState:
        loop = asyncio.get_running_loop()
        deadline = self._balancer.now() + self._wait_s
        while True:
            try:
                ep, wait_s = self._balancer.try_acquire(
                    avoid=tried, deadline=deadline, wait_s=self._wait_s, job_id=job_id,
                    cost=cost, wait_for_slot=True, interactive=interactive, home=home,
                )  # fmt: skip
            except TransientServiceError as exc:
                suffix = f"; last error: {last}" if last else ""
                raise TransientServiceError(
                    f"{exc}{suffix}",
                    endpoint=last.endpoint if last else None,
                    job_id=job_id,
                    attempts=attempts,
                ) from exc
            if ep is not None:
                return ep
            # No await between the failed try and registering: a release (always on this
            # loop, or scheduled onto it) cannot slip in unseen.
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters[interactive].append(waiter)
            timer = loop.call_later(wait_s, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()

    def _schedule_batch(self, items: list[BatchItem]) -> None:
        self._loop.submit(self._dispatch_guarded(items))

    async def _dispatch_guarded(self, items: list[BatchItem]) -> None:
        """A batch's coroutine: whatever happens, every caller of the batch is answered."""
        try:
            await self._dispatch_batch(items)
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else TransientServiceError(
                "the LLM gateway is closed"
            )
            for item in items:
                if not item.future.done():
                    item.future.set_exception(failure)
            if not isinstance(exc, Exception):
                raise

    async def _dispatch_batch(self, items: list[BatchItem]) -> None:
        # A prompt that may not leave room for max_tokens in the smallest known window goes
        # alone, where its max_tokens can be lowered without touching its batch-mates.
        window = self._balancer.smallest_window()
        tight = [i for i in items if fit_context(i.prompt, i.sampling, window) is not i.sampling]
        for item in tight:
            self._spawn(self._finish_single(item, 0, [], None))
        items = [i for i in items if i not in tight]
        if len(items) <= 1:
            for item in items:
                await self._finish_single(item, 0, [], None)
            return
        sampling = items[0].sampling  # one batch key: the same sampling, interactive or not
        interactive = sampling.interactive
        try:
            ep = await self._acquire([], items[0].job_id, 0, None, interactive, cost=len(items))
        except TransientServiceError as exc:
            for item in items:
                item.future.set_exception(exc)
            return
        try:
            reply = await self._attempt(
                ep, [i.prompt for i in items], sampling, stream=False, job_id=items[0].job_id
            )
        except PermanentServiceError:
            # One bad prompt fails a whole vLLM request: find it by sending each alone.
            self._release(ep, interactive, ok=True, cost=len(items))
            for item in items:
                self._spawn(self._finish_single(item, 1, [], None))
            return
        except TransientServiceError as exc:
            self._release(ep, interactive, ok=False, error=exc, cost=len(items))
            for item in items:
                self._spawn(self._finish_single(item, 1, [ep.url], exc))
            return
        except BaseException:
            self._cancel(ep, interactive, cost=len(items))
            raise
        self._release(ep, interactive, ok=True, cost=len(items))
        shares = split_usage(reply, items)
        for i, item in enumerate(items):
            try:
                choice = self._usable_choice(reply, ep, item.job_id, i)  # n == 1: index == position
            except TransientServiceError as exc:
                self._spawn(self._finish_single(item, 1, [ep.url], exc))
                continue
            item.future.set_result(
                to_generation(
                    choice, reply, ep, 1, item.started, shares[i], sampling.max_tokens, sampling,
                    item.prompt, prompts=len(items),
                )
            )

    def _usable_choice(self, reply: Reply, ep: EndpointState, job_id: str, index: int) -> Choice:
        """Choice ``index`` if it is an answer; a transient error if it is missing or unfinished."""
        choice = reply.choices.get(index)
        if choice is None:
            raise self._client.missing_choice(ep.target, job_id, index)
        if choice.finish_reason not in FINISHED_OK:
            raise UnfinishedChoiceError(
                f"{ep.target.display} ended the answer with finish_reason "
                f"{choice.finish_reason!r} (not stop/length): the request did not complete",
                endpoint=ep.target.display,
                job_id=job_id,
            )
        return choice

    async def _finish_single(
        self, item: BatchItem, attempts: int, tried: list[str], last: ServiceError | None
    ) -> None:
        try:
            gen = await self._run(
                item.prompt, item.sampling, item.job_id, item.started, attempts, tried, last
            )
        except BaseException as exc:
            if not item.future.done():
                item.future.set_exception(
                    exc if isinstance(exc, Exception) else TransientServiceError(
                        "the LLM gateway is closed", job_id=item.job_id
                    )
                )
            if not isinstance(exc, Exception):
                raise
        else:
            item.future.set_result(gen)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
