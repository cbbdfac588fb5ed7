"""The LLM gateway: one per process, shared by every thread of a Celery ``threads`` worker
and by the in-process runner of eager sweeps.

Every request runs as a coroutine on one event loop (the client's, see
``transport.py``); the retry loop (``dispatch.py``) runs there too, so holding hundreds of
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

A single question's request (``Sampling.interactive``) goes ahead of waiting sweep
requests and may take the ``llm_interactive_reserve`` slots of each endpoint that sweep
requests may not (``admission.py``, ``Balancer.sweep_cap``); with ``llm_priority`` every
request also carries vLLM's ``priority`` (docs/llm.md, 'Interactive requests first').

With the policy's ``share_samples`` (``Sampling.share_samples``), the samples of one prompt
handed over together (``submit_many``, grouped by ``qfarm.common.sharing.share_groups``) are
one request with ``n`` choices, choice j the j-th sample in seed order, or, on a server
without ``n`` (llama.cpp's), requests back to back on one endpoint; the group goes through
the retry loop as one unit (docs/llm.md, 'Shared samples').

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

The gateway composes its parts: ``pool.py`` (the endpoints, their client and balancer,
``health.py``'s poller), ``dispatch.py`` (admission and the retry loop, the async face),
``bridge.py`` (the blocking face threads use) and ``replies.py`` (context fitting, what a
reply becomes).
"""

from __future__ import annotations

import contextlib
import random
from concurrent.futures import Future

import httpx

from qfarm.common.errors import ServiceError
from qfarm.common.models import Generation, Sampling
from qfarm.common.settings import Settings
from qfarm.worker import metrics
from qfarm.worker.llm.bridge import ThreadBridge
from qfarm.worker.llm.dispatch import Dispatcher
from qfarm.worker.llm.pool import EndpointPool
from qfarm.worker.llm.response_cache import ResponseCache, ResponseStore

# How long ``Gateway.close`` lets requests in flight finish before ending them.
CLOSE_GRACE_S = 5.0


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
        response_store: ResponseStore | None = None,
    ):
        self.settings = settings
        self._pool = EndpointPool(settings, transport=transport)
        self._loop = self._pool.loop
        # None: no response cache here; requests of --cache runs then always ask the model.
        self.response_cache = (
            None if response_store is None else ResponseCache(response_store, settings.model)
        )
        self._dispatch = Dispatcher(self._pool, settings, rng, self.response_cache)
        self._pool.start()
        metrics.watch_endpoints(self.endpoint_states)  # in-flight and breakers for /metrics
        self._dispatch.start_batching(settings)
        self._bridge = ThreadBridge(self._loop, self._dispatch)
        self._closed = False

    def generate(self, prompt: str, sampling: Sampling, *, job_id: str) -> Generation:
        """One answer for one prompt, or a ``ServiceError`` saying why not."""
        return self.submit(prompt, sampling, job_id=job_id).result()

    def submit(self, prompt: str, sampling: Sampling, *, job_id: str) -> Future[Generation]:
        """``generate`` without waiting: the answer (or its ``ServiceError``) as a future."""
        return self.submit_many([(prompt, sampling, job_id)])[0]

    def submit_many(self, items: list[tuple[str, Sampling, str]]) -> list[Future[Generation]]:
        """Futures of many prompts, started with one wake-up of the loop."""
        return self._bridge.submit_many(items)

    def cancel_many(self, futures: list[Future[Generation]]) -> None:
        """Abandon prompts ``submit_many`` started (``ThreadBridge.cancel_many``): a
        cancelled run's requests still waiting for an endpoint, or in flight."""
        self._bridge.cancel_many(futures)

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
        return await self._dispatch.agenerate(prompt, sampling, job_id=job_id)

    def endpoint_states(self) -> list[dict[str, object]]:
        return self._pool.balancer.snapshot()

    def batch_stats(self) -> dict[str, float]:
        return self._dispatch.batch_stats()

    def close(self) -> None:
        """Stop taking requests, let those in flight finish (a few seconds at most), stop."""
        if self._closed:
            return
        self._closed = self._bridge.closed = True
        self._dispatch.stop_batching()
        self._pool.stop()  # waiting requests fail now: "the LLM gateway is closed"
        with contextlib.suppress(Exception):
            self._loop.run(self._dispatch.drain(CLOSE_GRACE_S))
        self._pool.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_gateway(settings: Settings, response_store: ResponseStore | None = None) -> Gateway:
    """The process's gateway; call once per process and share it across threads.
    ``response_store``: where runs with ``--cache`` keep model replies (none: not kept)."""
    return Gateway(settings, response_store=response_store)
