"""Which endpoint gets the next request: least outstanding, weighted, healthy, breaker-guarded.

Rules, in the order ``acquire`` applies them:

1. An endpoint is *usable* when its last ``/health`` poll passed, its circuit
   breaker lets a request through, its ``Retry-After`` time has passed, and it
   has fewer than ``max_inflight`` requests in flight from this process. A sweep
   request counts ``interactive_reserve`` fewer: those slots are kept for
   interactive requests (single questions), so one never waits for a sweep's
   request to end. An endpoint whose cap is one keeps no reserve (a sweep could
   never use it); it serves whoever the gateway admits first.
2. Endpoints the job already tried are avoided while another is usable
   (failover); if none is, the job may go back to one it tried.
3. Among the rest, the lowest estimated load per unit of capacity wins:
   ``(outstanding + others' load + cost) / weight``. ``outstanding`` is this
   process's in-flight count. With metrics weighting, each ``/metrics`` scrape
   gives the server's ``num_requests_running + num_requests_waiting``; what
   exceeds our own in-flight count is other processes' load. ``weight`` is the
   endpoint's capacity, learned as the running count seen while requests
   were waiting (a queue means every slot is busy); until an endpoint has been
   seen saturated it is assumed as large as the largest known one, so it gets
   at least an even share and reveals its capacity.
   A request may carry a *home key* (its prompt's opening through its evidence):
   the endpoints rank by a rendezvous hash of the key and the endpoint's URL, the
   same ranking in every process, and the first of them wins while its load is
   within ``affinity_slack`` requests of the lowest (``QFARM_LLM_PREFIX_AFFINITY``).
   Identical prompts sent apart (a question's samples, a rerun's requests; with
   ``prompt_order=evidence_first`` a question's modes too) so reach the endpoint
   whose prefix cache already holds them, from every worker;
   while that endpoint is further behind, or not usable, they go where rule 3
   sends any request. 0 turns it off.
4. Nothing usable: wait (bounded) for a slot, a Retry-After, a breaker
   cool-down or a health recovery, then raise ``TransientServiceError``. The
   gateway waits for a slot without that bound (``wait_for_slot``): a full
   endpoint is back-pressure, not a failure.

Circuit breaker (per endpoint): ``failures`` consecutive transient failures
(connect errors, timeouts, dropped connections, 5xx, malformed replies; not
back-pressure from a live server: a 429, which sets the Retry-After time
instead, or vLLM's queue-full 503) open it;
after ``cooldown_s`` one trial request is let through (half-open); its success
closes the breaker, its failure re-opens it for another cool-down.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from qfarm.common.errors import (
    BackPressureError,
    LLMConnectError,
    ServiceError,
    TransientServiceError,
)
from qfarm.common.grounding.prompts import shareable_opening
from qfarm.common.vocab import BreakerState
from qfarm.worker.llm.client import VLLM, Target


@dataclass
class EndpointState:
    target: Target
    healthy: bool = True
    health_reason: str | None = None
    outstanding: int = 0
    breaker: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    opened_at: float = 0.0
    trial_in_flight: bool = False
    not_before: float = 0.0
    others_load: float = 0.0
    capacity_seen: float = 0.0
    saturated_seen: bool = False
    retry_after_set_at: float = 0.0
    last_healthy_poll: float = float("-inf")
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    times_opened: int = 0
    max_model_len: int | None = None  # from /v1/models; None: not reported
    # Where liveness is asked: /health, or /v1/models on a server without one (a 404).
    health_path: str = "/health"
    # This endpoint's own in-flight cap when lower than the balancer's (a one-slot server).
    inflight_cap: int | None = None
    server: str | None = None  # what a non-vLLM server said it is (None: not recognised)
    # What /v1/models said this endpoint serves (client.served_identity), read at start-up:
    # the response cache's key. None: it said nothing, and its replies are never cached.
    served: dict[str, Any] | None = None
    metrics_problem: str | None = None  # why load weighting gets no figures from this endpoint

    @property
    def url(self) -> str:
        return self.target.url


class Balancer:
    """Thread-safe endpoint chooser; all state changes happen under one condition lock."""

    def __init__(
        self,
        targets: list[Target],
        *,
        max_inflight: int,
        breaker_failures: int,
        breaker_cooldown_s: float,
        metrics_weighting: bool = True,
        window_fallback: int | None = None,
        interactive_reserve: int = 0,
        affinity_slack: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not targets:
            raise ValueError("the balancer needs at least one endpoint")
        self.endpoints = [EndpointState(t) for t in targets]
        self._by_url = {e.url: e for e in self.endpoints}
        self.max_inflight = max(1, max_inflight)
        self.interactive_reserve = max(0, interactive_reserve)
        self.affinity_slack = max(0, affinity_slack)
        self.breaker_failures = max(1, breaker_failures)
        self.breaker_cooldown_s = breaker_cooldown_s
        self.metrics_weighting = metrics_weighting
        # The context window of endpoints whose /v1/models does not report one.
        self.window_fallback = window_fallback
        self._clock = clock
        self._cond = threading.Condition()
        self._closed = False
        # Called (under the lock, so it must only schedule) whenever a waiter may proceed.
        self.on_change: Callable[[], None] | None = None

    # ------------------------------------------------------------------ choosing

    def _blocker(
        self,
        e: EndpointState,
        now: float,
        cost: int,
        *,
        count_inflight: bool = True,
        interactive: bool = True,
    ) -> str | None:
        """Why ``e`` cannot take a request now (None: it can); a sweep request
        (``interactive`` False) may not take the interactive reserve."""
        if not e.healthy:
            return f"unhealthy ({e.health_reason or '/health failed'})"
        if e.breaker == BreakerState.OPEN and now < e.opened_at + self.breaker_cooldown_s:
            return f"breaker open for {e.opened_at + self.breaker_cooldown_s - now:.1f} s more"
        if e.breaker == BreakerState.HALF_OPEN and e.trial_in_flight:
            return "breaker half-open, trial request in flight"
        if now < e.not_before:
            return f"Retry-After for {e.not_before - now:.1f} s more"
        cap = self.cap(e) if interactive else self.sweep_cap(e)
        if count_inflight and e.outstanding and e.outstanding + cost > cap:
            if interactive:
                return f"{e.outstanding} requests in flight (max {cap})"
            return (f"{e.outstanding} requests in flight (max {cap} for sweeps, "
                    f"{self.cap(e) - cap} kept for interactive requests)")
        return None

    def _weight(self, e: EndpointState) -> float:
        if not self.metrics_weighting:
            return 1.0
        known = [x.capacity_seen for x in self.endpoints if x.saturated_seen]
        if not known:
            return 1.0
        if e.saturated_seen:
            return max(e.capacity_seen, 1.0)
        return max(max(known), e.capacity_seen, 1.0)

    def _score(self, e: EndpointState, cost: int) -> float:
        others = e.others_load if self.metrics_weighting else 0.0
        return (e.outstanding + others + cost) / self._weight(e)

    def _pick(
        self, now: float, avoid: Collection[str], cost: int, interactive: bool,
        home: str | None = None,
    ) -> EndpointState | None:  # fmt: skip
        usable = [
            e for e in self.endpoints
            if self._blocker(e, now, cost, interactive=interactive) is None
        ]
        fresh = [e for e in usable if e.url not in avoid]
        pool = fresh or usable
        if not pool:
            return None
        best = min(pool, key=lambda e: self._score(e, cost))
        if home is None or not self.affinity_slack or len(pool) == 1:
            return best
        first = max(pool, key=lambda e: _rendezvous(home, e.url))
        # The slack in requests, as a score on the home endpoint's scale.
        slack = self.affinity_slack / self._weight(first)
        return first if self._score(first, cost) <= self._score(best, cost) + slack else best

    def has_available(self, avoid: Collection[str] = (), *, interactive: bool = True) -> bool:
        """Is an endpoint not in ``avoid`` usable right now (failover without backoff)?"""
        with self._cond:
            now = self._clock()
            return any(
                self._blocker(e, now, 1, interactive=interactive) is None and e.url not in avoid
                for e in self.endpoints
            )

    def acquire(
        self,
        *,
        avoid: Collection[str] = (),
        wait_s: float = 60.0,
        job_id: str | None = None,
        cost: int = 1,
        wait_for_slot: bool = False,
        interactive: bool = True,
        home: str | None = None,
    ) -> EndpointState:
        """Reserve the best usable endpoint, waiting up to ``wait_s`` for one (``home``: the
        request's home key, rule 3).

        With ``wait_for_slot``, a job does not give up while some endpoint is merely
        full (healthy, at ``max_inflight`` from this process): that is back-pressure
        from this process's own requests, and one of them frees a slot within the
        request timeout. ``wait_s`` then bounds only the waits for endpoints that are
        down, open, or behind a Retry-After.
        """
        deadline = self._clock() + wait_s
        with self._cond:
            while True:
                e, wait = self._try_acquire(
                    avoid, deadline, wait_s, job_id, cost, wait_for_slot, interactive, home
                )
                if e is not None:
                    return e
                self._cond.wait(timeout=wait)

    def try_acquire(
        self,
        *,
        avoid: Collection[str] = (),
        deadline: float,
        wait_s: float,
        job_id: str | None = None,
        cost: int = 1,
        wait_for_slot: bool = False,
        interactive: bool = True,
        home: str | None = None,
    ) -> tuple[EndpointState | None, float]:
        """``acquire`` without the wait, for the gateway's event loop: the endpoint, or None
        and the seconds until a time-based blocker lifts (slots and health changes arrive
        through ``on_change``). Raises like ``acquire`` once ``deadline`` has passed."""
        with self._cond:
            return self._try_acquire(
                avoid, deadline, wait_s, job_id, cost, wait_for_slot, interactive, home
            )

    def _try_acquire(
        self,
        avoid: Collection[str],
        deadline: float,
        wait_s: float,
        job_id: str | None,
        cost: int,
        wait_for_slot: bool,
        interactive: bool,
        home: str | None = None,
    ) -> tuple[EndpointState | None, float]:
        if self._closed:
            raise TransientServiceError("the LLM gateway is closed", job_id=job_id)
        now = self._clock()
        e = self._pick(now, avoid, cost, interactive, home)
        if e is not None:
            if e.breaker == BreakerState.OPEN:  # cool-down over: this request is the trial
                e.breaker = BreakerState.HALF_OPEN
            if e.breaker == BreakerState.HALF_OPEN:
                e.trial_in_flight = True
            e.outstanding += cost
            e.sent += 1
            return e, 0.0
        if now >= deadline and not (
            wait_for_slot and self._any_only_full(now, cost, interactive)
        ):
            reasons = "; ".join(
                f"{x.target.display}: {self._blocker(x, now, cost, interactive=interactive)}"
                for x in self.endpoints
            )
            raise TransientServiceError(
                f"no LLM endpoint was usable for {wait_s:.0f} s ({reasons}); check the "
                "servers, or raise QFARM_LLM_WAIT_FOR_ENDPOINT_S",
                job_id=job_id,
            )
        # Past the deadline only a slot is awaited: release() notifies, so sleep until
        # the next time-based change instead of spinning on a negative remainder.
        remaining = deadline - now if now < deadline else float("inf")
        return None, min(remaining, self._next_change(now))

    def _notify(self) -> None:
        """Wake every waiter: threads in ``acquire`` and the listener (the event loop's)."""
        self._cond.notify_all()
        if self.on_change is not None:
            self.on_change()

    def _any_only_full(self, now: float, cost: int, interactive: bool) -> bool:
        """Is some endpoint blocked by nothing but its in-flight cap?"""
        return any(
            self._blocker(e, now, cost, interactive=interactive) is not None
            and self._blocker(e, now, cost, count_inflight=False) is None
            for e in self.endpoints
        )

    def _next_change(self, now: float) -> float:
        """Seconds until a time-based blocker lifts (capped: health/slots arrive by notify)."""
        times = [1.0]
        for e in self.endpoints:
            if e.not_before > now:
                times.append(e.not_before - now)
            if e.breaker == BreakerState.OPEN:
                times.append(max(e.opened_at + self.breaker_cooldown_s - now, 0.0))
        return max(min(times), 0.001)

    # ------------------------------------------------------------------ outcomes

    def release(
        self, e: EndpointState, *, ok: bool, error: ServiceError | None = None, cost: int = 1
    ) -> None:
        """Record the outcome of a request reserved with ``acquire``."""
        with self._cond:
            now = self._clock()
            e.outstanding = max(0, e.outstanding - cost)
            was_trial = e.breaker == BreakerState.HALF_OPEN and e.trial_in_flight
            if was_trial:
                e.trial_in_flight = False
            retry_after = error.retry_after_s if isinstance(error, TransientServiceError) else None
            if retry_after:
                e.not_before = max(e.not_before, now + retry_after)
                e.retry_after_set_at = now
            if ok:
                e.succeeded += 1
                e.consecutive_failures = 0
                e.breaker = BreakerState.CLOSED
            elif isinstance(error, BackPressureError):
                # Back-pressure from a live server (a proxy's 429, vLLM's queue-full 503): the
                # job goes elsewhere or waits; the breaker is for servers that are failing.
                e.failed += 1
                if was_trial:
                    e.breaker = BreakerState.CLOSED
            else:
                e.failed += 1
                e.consecutive_failures += 1
                if was_trial or (
                    e.breaker == BreakerState.CLOSED
                    and e.consecutive_failures >= self.breaker_failures
                ):
                    e.breaker = BreakerState.OPEN
                    e.opened_at = now
                    e.times_opened += 1
                if isinstance(error, LLMConnectError) and self._passive_health:
                    e.healthy = False
                    e.health_reason = "connection refused"
            self._notify()

    def cancel(self, e: EndpointState, *, cost: int = 1) -> None:
        """Give back a slot whose request was abandoned (the gateway closing): no outcome."""
        with self._cond:
            e.outstanding = max(0, e.outstanding - cost)
            e.trial_in_flight = False
            self._notify()

    def now(self) -> float:
        """The balancer's clock (deadlines for ``try_acquire`` are on it)."""
        return self._clock()

    _passive_health = False  # set by the gateway when a health poller will restore endpoints

    def enable_passive_health(self) -> None:
        self._passive_health = True

    def mark_health(self, url: str, healthy: bool, reason: str | None = None) -> None:
        """A ``/health`` poll's result.

        A passing poll also lifts a Retry-After that was set before the previous passing
        poll: the endpoint has rested a whole poll interval and says it is well, so a
        server (or proxy) cannot keep it out of rotation longer than that.
        """
        with self._cond:
            e = self._by_url[url]
            now = self._clock()
            changed = e.healthy != healthy
            e.healthy = healthy
            e.health_reason = None if healthy else (reason or "/health failed")
            if healthy:
                if e.not_before > now and e.retry_after_set_at <= e.last_healthy_poll:
                    e.not_before = now
                    changed = True
                e.last_healthy_poll = now
            if changed:
                self._notify()

    def cap(self, e: EndpointState) -> int:
        """How many requests ``e`` may have in flight from this process."""
        return min(self.max_inflight, e.inflight_cap or self.max_inflight)

    def sweep_cap(self, e: EndpointState) -> int:
        """How many of them may be sweep requests: the cap less the interactive reserve,
        never below one (a one-slot server keeps no reserve)."""
        cap = self.cap(e)
        return cap - min(self.interactive_reserve, cap - 1)

    def set_max_model_len(self, url: str, value: int | None) -> None:
        """The window ``/v1/models`` reported, else ``window_fallback`` (the configured one)."""
        with self._cond:
            self._by_url[url].max_model_len = value or self.window_fallback

    def set_served(self, url: str, served: dict[str, Any] | None) -> None:
        with self._cond:
            self._by_url[url].served = served

    def set_server(self, url: str, name: str, *, one_slot: bool, dialect: str = VLLM) -> None:
        """A recognised non-vLLM server; a one-slot one gets an in-flight cap of 1, and its
        requests are written in its dialect from now on."""
        with self._cond:
            e = self._by_url[url]
            e.server = name
            e.target = replace(e.target, dialect=dialect)
            if one_slot:
                e.inflight_cap = 1
            self._notify()

    def set_health_path(self, url: str, path: str) -> bool:
        """Where ``url``'s liveness is read from now on; True when that changed."""
        with self._cond:
            e = self._by_url[url]
            changed = e.health_path != path
            e.health_path = path
            return changed

    def smallest_window(self) -> int | None:
        """The smallest ``max_model_len`` any endpoint reported (None: none did)."""
        with self._cond:
            known = [e.max_model_len for e in self.endpoints if e.max_model_len]
            return min(known) if known else None

    def set_metrics_problem(self, url: str, problem: str | None) -> bool:
        """Record why an endpoint has no load figures; True when that changed."""
        with self._cond:
            e = self._by_url[url]
            changed = e.metrics_problem != problem
            e.metrics_problem = problem
            return changed

    def weighting_state(self, e: EndpointState) -> str:
        if not self.metrics_weighting:
            return "off (QFARM_LLM_METRICS_WEIGHTING=false)"
        if e.metrics_problem:
            return f"off: {e.metrics_problem}"
        return "on"

    def update_load(self, url: str, running: float, waiting: float) -> None:
        """Fold one ``/metrics`` scrape into the endpoint's load and capacity estimates."""
        with self._cond:
            e = self._by_url[url]
            e.others_load = max(0.0, running + waiting - e.outstanding)
            e.capacity_seen = max(e.capacity_seen, running)
            if waiting > 0 and running > 0:
                e.saturated_seen = True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._notify()

    def snapshot(self) -> list[dict[str, Any]]:
        """Per-endpoint state for status displays and tests (never the keys)."""
        with self._cond:
            now = self._clock()
            return [
                {
                    "endpoint": e.target.display,
                    "healthy": e.healthy,
                    "breaker": e.breaker,
                    "outstanding": e.outstanding,
                    "consecutive_failures": e.consecutive_failures,
                    "sent": e.sent,
                    "succeeded": e.succeeded,
                    "failed": e.failed,
                    "times_opened": e.times_opened,
                    "retry_after_left_s": round(max(0.0, e.not_before - now), 3),
                    "weight": self._weight(e),
                    "weighting": self.weighting_state(e),
                    "max_model_len": e.max_model_len,
                    "max_inflight": self.cap(e),
                    "sweep_max_inflight": self.sweep_cap(e),
                    "server": e.server,
                    "health_path": e.health_path,
                    "blocked": self._blocker(e, now, 1),
                }
                for e in self.endpoints
            ]


def _rendezvous(key: str, url: str) -> bytes:
    """The rank of endpoint ``url`` for ``key`` (highest wins): the same in every process,
    and removing one endpoint moves only the keys whose first choice it was."""
    return hashlib.blake2b(f"{url}\n{key}".encode(), digest_size=8).digest()


def home_key(prompt: str) -> str:
    """A prompt's home key (rule 3): a hash of its opening through its evidence
    (``shareable_opening``), so the prompts a prefix cache can share a beginning with go
    to one home: a prompt's samples always, and with ``prompt_order=evidence_first`` a
    question's prompts in every mode. Short, so ranking endpoints hashes a few bytes each."""
    return hashlib.blake2b(shareable_opening(prompt).encode(), digest_size=16).hexdigest()
