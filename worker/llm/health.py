"""The health poller a gateway runs in the background: each endpoint's liveness, its
context window once known, and its load (``/metrics``) for weighting."""

from __future__ import annotations

import logging
import threading

from qfarm.worker.llm.balancer import Balancer, EndpointState
from qfarm.worker.llm.client import HEALTH_PATH, MODELS_PATH, LLMClient

log = logging.getLogger("qfarm.llm")


class HealthPoller:
    """Polls ``/health`` (and ``/metrics`` when weighting) of every endpoint."""

    def __init__(self, client: LLMClient, balancer: Balancer, interval_s: float, metrics: bool):
        self._client = client
        self._balancer = balancer
        self._interval_s = interval_s
        self._metrics = metrics
        self._stop = threading.Event()
        # One poll at a time: a poll reads an endpoint's state and writes it back, and two
        # interleaved (the loop's and a caller's) could write a stale verdict last.
        self._polling = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="qfarm-llm-health", daemon=True)
        self._thread.start()

    def poll_once(self) -> None:
        with self._polling:
            self._poll()

    def _poll(self) -> None:
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
        path = e.health_path
        probe = self._client.probe(e.target, path, timeout)
        if path == HEALTH_PATH and probe.status == 404:
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
