"""The LLM gateway: one per process, shared by every thread of a Celery ``threads`` worker
and by the in-process runner of eager sweeps.

Every request runs as a coroutine on one event loop (the client's, see
``transport.py``); the retry loop below runs there too, so holding hundreds of
requests in flight costs coroutines, not threads. Threads hand requests over
with ``generate``/``generate_many`` (blocking) or ``submit_many`` (futures).

``generate`` sends one prompt through the balancer and the one retry layer:

* a transient failure (connect error, timeout, dropped connection, 429, 5xx,
  malformed body, no usable choice) is retried up to ``llm_max_attempts``
  requests in total, on another usable endpoint at once when there is one
  (failover), otherwise after an exponential backoff with jitter; a
  ``Retry-After`` keeps every request of this process off that endpoint until
  the time has passed;
* back-pressure from a live server (a proxy's 429 + Retry-After, vLLM's
  queue-full 503) is retried the same way but never counts towards the
  circuit breaker; a queue-full endpoint is held off for one backoff interval,
  and those retries do not use up the attempt budget for
  ``llm_wait_for_endpoint_s``;
* a reply is an answer only when its choice finished with ``stop`` or
  ``length``: an error event inside a stream, a finish of ``abort`` (or any
  other reason, or none) is a failed attempt; ``length`` is kept and marked
  ``truncated``;
* a permanent failure (400 incl. validation and context length, 401/403, 404,
  422, 501) raises ``PermanentServiceError`` at once;
* giving up raises ``TransientServiceError``; both carry ``endpoint``,
  ``job_id`` and ``attempts``, and their messages never contain a key.

With ``llm_batch_size`` > 1 prompts go through the micro-batcher instead; a
batch that fails, or a prompt missing from a batch reply, continues on the
same retry loop one prompt at a time, so batch-mates never fail silently.

A background thread polls each endpoint's ``/health`` (out of rotation on
failure, back on success; ``/v1/models`` on a server without ``/health``) and
``/metrics`` (load weighting) every ``llm_health_interval_s``. A server that
says it is llama.cpp's Python server gets at most one request in flight.

Context window: at start-up the gateway reads each endpoint's
``max_model_len`` from ``/v1/models``. vLLM rejects a prompt longer than it,
but silently lowers ``max_tokens`` when prompt + ``max_tokens`` does not fit.
So before sending, a prompt whose estimated token count (``estimate_tokens``,
an over-estimate for English text) leaves less than ``max_tokens`` gets a
lowered ``max_tokens``; after the reply, the server's own prompt token count
tells whether it lowered the budget itself. Either way the row records
``max_tokens_effective``, so a short answer is never silently scored as the
model's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, Future
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from common.errors import (
    ConfigError,
    PermanentServiceError,
    QueueFullError,
    ServiceError,
    TransientServiceError,
    UnfinishedChoiceError,
)
from common.models import Generation, Sampling, Usage
from common.settings import Settings, api_keys_by_endpoint
from common.urls import redact_url
from worker import metrics
from worker.llm.balancer import Balancer, EndpointState
from worker.llm.batcher import BatchItem, MicroBatcher
from worker.llm.client import (
    FINISHED_OK,
    HEALTH_PATH,
    MODELS_PATH,
    Choice,
    LLMClient,
    Reply,
    Target,
)
from worker.llm.retry import RetryPolicy, compute_backoff

log = logging.getLogger("qfarm.llm")
T = TypeVar("T")

# How long ``Gateway.close`` lets requests in flight finish before ending them.
CLOSE_GRACE_S = 5.0

# vLLM refuses more prompts per /v1/completions request (VLLM_MAX_COMPLETION_PROMPTS).
MAX_COMPLETION_PROMPTS = 1024
# Characters per token assumed when estimating a prompt's size: Llama-3's tokenizer averages
# ~4 on English prose, so 3 over-estimates the tokens and under-estimates what is left.
CHARS_PER_TOKEN_ESTIMATE = 3


def estimate_tokens(prompt: str) -> int:
    """A conservative (high) estimate of a prompt's token count, plus one for BOS."""
    return -(-len(prompt) // CHARS_PER_TOKEN_ESTIMATE) + 1


def build_targets(settings: Settings) -> list[Target]:
    endpoints = settings.endpoints
    if not endpoints:
        raise ConfigError(
            "QFARM_LLM_ENDPOINTS is empty: set it to the vLLM base URLs "
            "(e.g. http://gpu1:8000,http://gpu2:8000), or run `qfarm sim` and point it there"
        )
    for url in endpoints:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"QFARM_LLM_ENDPOINTS: {redact_url(url)!r} is not an http(s) base URL; write e.g. "
                f"http://{redact_url(url)}"
            )
    keys = api_keys_by_endpoint(
        settings.llm_api_keys.get_secret_value() if settings.llm_api_keys else None, endpoints
    )
    default = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return [Target(url, keys.get(url, default)) for url in endpoints]


class HealthPoller:
    """Polls ``/health`` (and ``/metrics`` when weighting) of every endpoint."""

    def __init__(self, client: LLMClient, balancer: Balancer, interval_s: float, metrics: bool):
        self._client = client
        self._balancer = balancer
        self._interval_s = interval_s
        self._metrics = metrics
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="qfarm-llm-health", daemon=True)
        self._thread.start()

    def poll_once(self) -> None:
        timeout = max(0.2, min(2.0, self._interval_s))
        for e in self._balancer.endpoints:
            healthy, reason = self._liveness(e, timeout)
            self._balancer.mark_health(e.url, healthy, reason)
            if healthy and e.max_model_len is None:
                self._balancer.set_max_model_len(
                    e.url, self._client.max_model_len(e.target, timeout)
                )
            if healthy and self._metrics:
                scrape = self._client.scrape_metrics(e.target, timeout)
                if self._balancer.set_metrics_problem(e.url, scrape.problem):
                    if scrape.problem:
                        log.warning(
                            "%s: load weighting is off for this endpoint: %s",
                            e.target.display,
                            scrape.problem,
                        )
                    else:
                        log.info("%s: load weighting is on (metrics found)", e.target.display)
                if scrape.values:
                    self._balancer.update_load(
                        e.url,
                        scrape.values["vllm:num_requests_running"],
                        scrape.values["vllm:num_requests_waiting"],
                    )

    def _liveness(self, e: EndpointState, timeout: float) -> tuple[bool, str | None]:
        """``/health``; on a server without one (404: llama.cpp's), ``/v1/models`` from then on.

        ``/v1/models`` on llama.cpp's server waits for the model, which is busy while it
        answers one of our requests: a timeout then is a busy endpoint, not a dead one.
        A refused connection or an error status still takes the endpoint out.
        """
        probe = self._client.probe(e.target, e.health_path, timeout)
        if e.health_path == HEALTH_PATH and probe.status == 404:
            if self._balancer.set_health_path(e.url, MODELS_PATH):  # said once, by one poll
                log.warning(
                    "%s has no /health (404): its liveness is read from /v1/models instead",
                    e.target.display,
                )
            probe = self._client.probe(e.target, MODELS_PATH, timeout)
        if probe.ok:
            return True, None
        busy = probe.failure == "timeout" and e.health_path == MODELS_PATH and e.outstanding > 0
        return busy, None if busy else probe.reason

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a poller crash must not leave endpoints stuck
                log.exception("LLM health poll failed")
            self._stop.wait(self._interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


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


class Gateway:
    """Thread-safe; ``generate`` may be called from many threads at once.

    Every request is a coroutine on the client's event loop (one loop per gateway, so
    per process). ``generate`` and ``generate_many`` block the calling thread until
    their answers are in; ``submit`` returns a ``concurrent.futures.Future`` at once
    (the in-process runner); ``agenerate`` is the coroutine itself, for code already
    on the gateway's loop.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ):
        targets = build_targets(settings)
        max_inflight = max(1, settings.llm_max_inflight_per_endpoint)
        self.settings = settings
        self._client = LLMClient(
            model=settings.model,
            timeout_s=settings.llm_timeout_s,
            connect_timeout_s=settings.llm_connect_timeout_s,
            # Per endpoint: every request in flight, plus the health and metrics probes.
            max_connections=max_inflight + 2,
            transport=transport,
            retry_after_max_s=settings.llm_retry_after_max_s,
        )
        self._loop = self._client.loop_thread
        for t in targets:
            self._client.register_secret(t.api_key)
        self._balancer = Balancer(
            targets,
            max_inflight=max_inflight,
            breaker_failures=settings.llm_breaker_failures,
            breaker_cooldown_s=settings.llm_breaker_cooldown_s,
            metrics_weighting=settings.llm_metrics_weighting,
            window_fallback=settings.llm_context_window,
        )
        # Coroutines waiting for an endpoint; woken (all) whenever the balancer's state
        # changes, like the threads of a Condition.notify_all. Touched on the loop only.
        self._waiters: list[asyncio.Future[None]] = []
        self._balancer.on_change = self._on_change
        self._tasks: set[asyncio.Task[Any]] = set()
        # One permit per slot of every endpoint, taken before the balancer is asked: queued
        # requests wait here, first come first served, and a finished request wakes exactly
        # one of them (the balancer's waiters all wake on every change). Single-prompt
        # requests only: a batch takes its slots from the balancer directly.
        self._permits = asyncio.Semaphore(len(targets) * max_inflight)
        self._policy = RetryPolicy(
            max_attempts=max(1, settings.llm_max_attempts),
            base_s=settings.llm_backoff_base_s,
            max_s=settings.llm_backoff_max_s,
        )
        self._rng = rng or random.Random()
        self._stream = settings.llm_stream
        self._wait_s = settings.llm_wait_for_endpoint_s
        # Short: an endpoint down at start-up is asked again by the health poller.
        probe_s = max(0.5, min(2.0, settings.llm_connect_timeout_s))
        for e in self._balancer.endpoints:
            self._balancer.set_max_model_len(e.url, self._client.max_model_len(e.target, probe_s))
            self._recognise(e, probe_s)
        self._poller: HealthPoller | None = None
        if settings.llm_health_interval_s <= 0 and settings.llm_metrics_weighting:
            log.warning(
                "load weighting is off: QFARM_LLM_HEALTH_INTERVAL_S=0 stops /metrics polling"
            )
            for e in self._balancer.endpoints:
                self._balancer.set_metrics_problem(
                    e.url, "no /metrics polling (QFARM_LLM_HEALTH_INTERVAL_S=0)"
                )
        if settings.llm_health_interval_s > 0:
            self._balancer.enable_passive_health()
            self._poller = HealthPoller(
                self._client,
                self._balancer,
                settings.llm_health_interval_s,
                settings.llm_metrics_weighting,
            )
        metrics.watch_endpoints(self.endpoint_states)  # in-flight and breakers for /metrics
        self._batcher: MicroBatcher | None = None
        batch_size = settings.llm_batch_size  # at most MAX_COMPLETION_PROMPTS (settings)
        if batch_size > 1:
            self._batcher = MicroBatcher(
                self._schedule_batch,
                max_batch=batch_size,
                max_wait_s=settings.llm_batch_wait_ms / 1000.0,
                executor=_InlineExecutor(),
            )
        self._closed = False

    def _recognise(self, e: EndpointState, timeout_s: float) -> None:
        """Adapt to a server that is not vLLM, said once in the log.

        See docs/llm.md, 'Other OpenAI-compatible servers': llama.cpp's Python server
        answers one request at a time, so more in flight would only queue inside it and
        time out there."""
        info = self._client.server_info(e.target, timeout_s)
        if info is None:
            return
        self._balancer.set_server(e.url, info.name, one_slot=info.one_slot)
        window = e.max_model_len or "unknown: set QFARM_LLM_CONTEXT_WINDOW to its --n_ctx"
        log.warning(
            # Its missing /metrics is said by the poller, once, like any endpoint's.
            "%s is %s: %s; context window %s; QFARM_LLM_TIMEOUT_S=%g s must cover a CPU "
            "answer and the queue other processes make at that server",
            e.target.display,
            info.name,
            "one request in flight at a time" if info.one_slot else "its own in-flight limits",
            window,
            self.settings.llm_timeout_s,
        )

    # ------------------------------------------------------------------ public

    def generate(self, prompt: str, sampling: Sampling, *, job_id: str) -> Generation:
        """One answer for one prompt, or a ``ServiceError`` saying why not."""
        return self.submit(prompt, sampling, job_id=job_id).result()

    def submit(self, prompt: str, sampling: Sampling, *, job_id: str) -> Future[Generation]:
        """``generate`` without waiting: the answer (or its ``ServiceError``) as a future."""
        return self.submit_many([(prompt, sampling, job_id)])[0]

    def submit_many(self, items: list[tuple[str, Sampling, str]]) -> list[Future[Generation]]:
        """Futures of many prompts, started with one wake-up of the loop (waking it costs a
        write to its self-pipe: per prompt, a tenth of an eager run's CPU)."""
        if self._loop.in_loop():
            raise RuntimeError("submit was called on the gateway's event loop; use agenerate")
        futures: list[Future[Generation]] = [Future() for _ in items]
        pairs = list(zip(items, futures, strict=True))
        if self._closed or not self._loop.call_soon(self._start_many, pairs):
            for f in futures:
                f.set_exception(TransientServiceError("the LLM gateway is closed"))
        return futures

    def generate_many(
        self, items: list[tuple[str, Sampling, str]]
    ) -> list[Generation | ServiceError]:
        """Many prompts at once, results in input order; failures are returned, not raised."""
        futures = self.submit_many(items)
        results: list[Generation | ServiceError] = []
        for f in futures:
            try:
                results.append(f.result())
            except ServiceError as exc:
                results.append(exc)
        return results

    async def agenerate(self, prompt: str, sampling: Sampling, *, job_id: str) -> Generation:
        """The coroutine behind ``generate``; runs on the gateway's loop only."""
        if sampling.n != 1:
            sampling = sampling.model_copy(update={"n": 1})  # one Generation per job
        if self._batcher is not None:
            return await asyncio.wrap_future(self._batcher.submit(prompt, sampling, job_id))
        return await self._run(prompt, sampling, job_id, time.perf_counter())

    def endpoint_states(self) -> list[dict[str, object]]:
        return self._balancer.snapshot()

    def batch_stats(self) -> dict[str, float]:
        if self._batcher is None:
            return {"batches": 0, "mean_batch_size": 0.0}
        return {
            "batches": self._batcher.batches_sent,
            "mean_batch_size": self._batcher.mean_batch_size(),
        }

    def close(self) -> None:
        """Stop taking requests, let those in flight finish (a few seconds at most), stop."""
        if self._closed:
            return
        self._closed = True
        if self._batcher is not None:
            self._batcher.close()
        if self._poller is not None:
            self._poller.close()
        self._balancer.close()  # waiting requests fail now: "the LLM gateway is closed"
        with contextlib.suppress(Exception):
            self._loop.run(self._drain(CLOSE_GRACE_S))
        self._client.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop's plumbing

    def _start_many(
        self, pairs: list[tuple[tuple[str, Sampling, str], Future[Generation]]]
    ) -> None:
        loop = asyncio.get_running_loop()
        for (prompt, sampling, job_id), future in pairs:
            if not future.set_running_or_notify_cancel():
                continue  # the caller cancelled it meanwhile
            task = loop.create_task(self._tracked(self.agenerate(prompt, sampling, job_id=job_id)))
            task.add_done_callback(functools.partial(_settle, future))

    async def _tracked(self, coro: Coroutine[Any, Any, T]) -> T:
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

    async def _drain(self, grace_s: float) -> None:
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
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # ------------------------------------------------------------------ hooks

    def _observe_attempt(
        self, ep: EndpointState, seconds: float, error: ServiceError | None
    ) -> None:
        """The one place where an HTTP attempt's outcome is known (endpoint, duration,
        error or None): counted for /metrics (worker/metrics.py)."""
        metrics.observe_request(ep.target.display, seconds, error)

    def _observe_endpoint(self, ep: EndpointState) -> None:
        """Called after every release: ``ep.outstanding`` (in flight) and ``ep.breaker``
        are current here, for gauges."""

    # ------------------------------------------------------------------ the retry loop

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
        self, ep: EndpointState, *, ok: bool, error: ServiceError | None = None, cost: int = 1
    ) -> None:
        self._balancer.release(ep, ok=ok, error=error, cost=cost)
        if cost == 1:
            self._permits.release()
        self._observe_endpoint(ep)

    def _cancel(self, ep: EndpointState, cost: int = 1) -> None:
        """Give a slot back without an outcome (cancelled while closing, or a bug)."""
        self._balancer.cancel(ep, cost=cost)
        if cost == 1:
            self._permits.release()

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
        tried = list(tried or [])
        # Back-pressure (vLLM's queue-full 503) is a wait, not a failure: those retries do not
        # use up the attempt budget, for up to llm_wait_for_endpoint_s after the first one.
        uncharged = overloads = 0
        pressed_since: float | None = None
        while attempts - uncharged < self._policy.max_attempts:
            if attempts and not self._balancer.has_available(avoid=tried):
                await asyncio.sleep(compute_backoff(attempts, self._policy, self._rng))
            ep = await self._acquire(tried, job_id, attempts, last)
            attempts += 1
            tried.append(ep.url)
            sent = _fit_context(prompt, sampling, ep.max_model_len)
            try:
                reply = await self._attempt(ep, [prompt], sent, stream=self._stream, job_id=job_id)
                choice = self._usable_choice(reply, ep, job_id, 0)
            except PermanentServiceError as exc:
                self._release(ep, ok=True)  # the server answered: it is alive
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
                self._release(ep, ok=False, error=exc)
                last = exc
                log.warning("job %s: attempt %d failed: %s", job_id, attempts, exc)
                continue
            except BaseException:
                self._cancel(ep)  # cancelled (closing) or a bug: give the slot back
                raise
            self._release(ep, ok=True)
            return _generation(
                choice, reply, ep, attempts, started, reply.usage, sampling.max_tokens, sent
            )
        assert last is not None
        raise TransientServiceError(
            f"gave up after {attempts} attempts; last error: {last}",
            endpoint=last.endpoint,
            job_id=job_id,
            attempts=attempts,
        )

    async def _acquire(
        self, tried: list[str], job_id: str, attempts: int, last: ServiceError | None, cost: int = 1
    ) -> EndpointState:
        """``Balancer.acquire`` for the loop: waits on a future, never blocks the thread."""
        if cost == 1:
            await self._permits.acquire()
        try:
            return await self._acquire_endpoint(tried, job_id, attempts, last, cost)
        except BaseException:
            if cost == 1:
                self._permits.release()
            raise

    async def _acquire_endpoint(
        self, tried: list[str], job_id: str, attempts: int, last: ServiceError | None, cost: int
    ) -> EndpointState:
        loop = asyncio.get_running_loop()
        deadline = self._balancer.now() + self._wait_s
        while True:
            try:
                ep, wait_s = self._balancer.try_acquire(
                    avoid=tried, deadline=deadline, wait_s=self._wait_s, job_id=job_id,
                    cost=cost, wait_for_slot=True,
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
            self._waiters.append(waiter)
            timer = loop.call_later(wait_s, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()

    # ------------------------------------------------------------------ batches

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
        tight = [i for i in items if _fit_context(i.prompt, i.sampling, window) is not i.sampling]
        for item in tight:
            self._spawn(self._finish_single(item, 0, [], None))
        items = [i for i in items if i not in tight]
        if len(items) <= 1:
            for item in items:
                await self._finish_single(item, 0, [], None)
            return
        sampling = items[0].sampling
        try:
            ep = await self._acquire([], items[0].job_id, 0, None, cost=len(items))
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
            self._release(ep, ok=True, cost=len(items))
            for item in items:
                self._spawn(self._finish_single(item, 1, [], None))
            return
        except TransientServiceError as exc:
            self._release(ep, ok=False, error=exc, cost=len(items))
            for item in items:
                self._spawn(self._finish_single(item, 1, [ep.url], exc))
            return
        except BaseException:
            self._cancel(ep, cost=len(items))
            raise
        self._release(ep, ok=True, cost=len(items))
        shares = _split_usage(reply, items)
        for i, item in enumerate(items):
            try:
                choice = self._usable_choice(reply, ep, item.job_id, i)  # n == 1: index == position
            except TransientServiceError as exc:
                self._spawn(self._finish_single(item, 1, [ep.url], exc))
                continue
            item.future.set_result(
                _generation(
                    choice, reply, ep, 1, item.started, shares[i], sampling.max_tokens, sampling
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


def _settle(future: Future[Generation], task: asyncio.Task[Generation]) -> None:
    """Hand a task's outcome to the caller's future (the caller may be on any thread)."""
    if task.cancelled():
        future.set_exception(TransientServiceError("the LLM gateway is closed"))
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _fit_context(prompt: str, sampling: Sampling, max_model_len: int | None) -> Sampling:
    """``sampling`` with ``max_tokens`` lowered when the estimated prompt leaves less room.

    A prompt estimated to fill the whole window is sent unchanged: the estimate is high on
    purpose, so only the server can say it does not fit (a ContextOverflowError then).
    """
    if max_model_len is None:
        return sampling
    room = max_model_len - estimate_tokens(prompt)
    if room >= sampling.max_tokens or room < 1:
        return sampling
    return sampling.model_copy(update={"max_tokens": room})


def _effective_max_tokens(
    asked: int, sent: Sampling, usage: Usage, max_model_len: int | None
) -> int | None:
    """The token budget the answer really had, when lower than the policy's ``max_tokens``."""
    budget = sent.max_tokens
    if max_model_len is not None and usage.prompt_tokens is not None:
        # vLLM lowers max_tokens to what the window leaves, without saying so.
        budget = min(budget, max_model_len - usage.prompt_tokens)
    return budget if budget < asked else None


def _generation(
    choice: Choice,
    reply: Reply,
    ep: EndpointState,
    attempts: int,
    started: float,
    usage: Usage,
    asked_max_tokens: int,
    sent: Sampling,
) -> Generation:
    return Generation(
        text=choice.text,
        finish_reason=choice.finish_reason,
        truncated=choice.finish_reason == "length",
        max_tokens_effective=_effective_max_tokens(
            asked_max_tokens, sent, reply.usage, ep.max_model_len
        ),
        endpoint=ep.target.display,
        attempts=attempts,
        usage=usage,
        llm_ms=round((time.perf_counter() - started) * 1000.0, 3),
        ttft_ms=round(reply.ttft_ms, 3) if reply.ttft_ms is not None else None,
        simulated=reply.simulated,
        server=ep.server,
    )


def _split_usage(reply: Reply, items: list[BatchItem]) -> list[Usage]:
    """Per-prompt share of a batch's summed usage, in proportion to characters (an estimate:
    vLLM reports usage per request, not per prompt)."""
    total_p, total_c = reply.usage.prompt_tokens, reply.usage.completion_tokens
    p_chars = [len(i.prompt) for i in items]
    c_chars = [len(reply.choices[k].text) if k in reply.choices else 0 for k in range(len(items))]

    def share(total: int | None, chars: list[int], k: int) -> int | None:
        if total is None:
            return None
        whole = sum(chars)
        return round(total * chars[k] / whole) if whole else round(total / len(chars))

    return [
        Usage(
            prompt_tokens=share(total_p, p_chars, k), completion_tokens=share(total_c, c_chars, k)
        )
        for k in range(len(items))
    ]


def endpoint_report(settings: Settings, timeout_s: float = 2.0) -> list[str]:
    """One line per configured endpoint, as ``qfarm status`` prints them: health, the
    context window, and whether load weighting works for it (and why not)."""
    if not settings.endpoints:
        return ["LLM endpoints: none configured (sweeps start the simulator)"]
    try:
        targets = build_targets(settings)
    except ConfigError as exc:
        return [f"LLM endpoints: {exc}"]
    client = LLMClient(
        model=settings.model,
        timeout_s=timeout_s,
        connect_timeout_s=min(timeout_s, settings.llm_connect_timeout_s),
        max_connections=1,
    )
    for t in targets:
        client.register_secret(t.api_key)
    balancer = Balancer(
        targets,
        max_inflight=1,
        breaker_failures=1,
        breaker_cooldown_s=0.0,
        metrics_weighting=settings.llm_metrics_weighting,
    )
    lines = []
    try:
        for e in balancer.endpoints:
            probe = client.probe(e.target, HEALTH_PATH, timeout_s)
            if probe.status == 404:  # no /health (llama.cpp's server): /v1/models answers
                probe = client.probe(e.target, MODELS_PATH, timeout_s)
            healthy = probe.ok
            window = client.max_model_len(e.target, timeout_s) if healthy else None
            info = client.server_info(e.target, timeout_s) if healthy else None
            if healthy and settings.llm_metrics_weighting:
                balancer.set_metrics_problem(
                    e.url, client.scrape_metrics(e.target, timeout_s).problem
                )
            elif not healthy:
                balancer.set_metrics_problem(e.url, "endpoint not healthy")
            configured = f"{settings.llm_context_window} (QFARM_LLM_CONTEXT_WINDOW)" if (
                settings.llm_context_window) else "unknown"
            lines.append(
                f"endpoint {e.target.display}: "
                f"{'healthy' if healthy else probe.reason}  "
                + (f"server={info.name}{' (one request at a time)' if info.one_slot else ''}  "
                   if info else "")
                + f"max_model_len={window or configured}  "
                f"load weighting {balancer.weighting_state(e)}"
            )
    finally:
        client.close()
    return lines


def open_gateway(settings: Settings) -> Gateway:
    """The process's gateway; call once per process and share it across threads."""
    return Gateway(settings)
