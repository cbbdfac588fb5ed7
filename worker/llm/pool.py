"""A gateway's endpoints: their targets (URL and key), the HTTP client and its event loop,
the balancer (slots, breakers, load, context windows) and the health poller; and the
one-off report of the endpoints' state ``qfarm status`` prints."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import httpx

from qfarm.common.errors import ConfigError
from qfarm.common.settings import Settings, api_keys_by_endpoint
from qfarm.common.urls import redact_url
from qfarm.worker.llm.balancer import Balancer, EndpointState
from qfarm.worker.llm.client import (
    HEALTH_PATH,
    MODELS_PATH,
    LLMClient,
    Target,
    served_identity,
    window_of,
)
from qfarm.worker.llm.health import HealthPoller

log = logging.getLogger("qfarm.llm")



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
    for url in endpoints:
        if urlsplit(url).username is not None and keys.get(url, default) is not None:
            # httpx refuses both ("Cannot combine AUTHORIZATION header"): every job would fail.
            raise ConfigError(
                f"QFARM_LLM_ENDPOINTS: {redact_url(url)!r} carries credentials in its URL and an "
                "API key applies to it too (QFARM_LLM_API_KEY or QFARM_LLM_API_KEYS): give one, "
                "the key (remove user:password@ from the URL) or the URL's credentials"
            )
    return [Target(url, keys.get(url, default), priority=settings.llm_priority) for url in endpoints]


class EndpointPool:
    """The endpoints one gateway sends to, and what is known of each (``balancer``)."""

    def __init__(
        self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None
    ):
        targets = build_targets(settings)
        max_inflight = max(1, settings.llm_max_inflight_per_endpoint)
        self.settings = settings
        self.client = LLMClient(
            model=settings.model,
            timeout_s=settings.llm_timeout_s,
            connect_timeout_s=settings.llm_connect_timeout_s,
            # Per endpoint: every request in flight, plus the health and metrics probes.
            max_connections=max_inflight + 2,
            transport=transport,
            retry_after_max_s=settings.llm_retry_after_max_s,
        )
        self.loop = self.client.loop_thread
        for t in targets:
            self.client.register_secret(t.api_key)
        self.balancer = Balancer(
            targets,
            max_inflight=max_inflight,
            breaker_failures=settings.llm_breaker_failures,
            breaker_cooldown_s=settings.llm_breaker_cooldown_s,
            metrics_weighting=settings.llm_metrics_weighting,
            window_fallback=settings.llm_context_window,
            interactive_reserve=settings.llm_interactive_reserve,
            affinity_slack=settings.llm_prefix_affinity,
        )
        self.slots = len(targets) * max_inflight  # requests in flight at once, all endpoints
        # Of those, the ones sweep requests may hold (the rest: the interactive reserve).
        self.sweep_slots = len(targets) * (
            max_inflight - min(settings.llm_interactive_reserve, max_inflight - 1)
        )
        self._poller: HealthPoller | None = None

    def start(self) -> None:
        """Read each endpoint's context window and server, then start the health poller."""
        settings = self.settings
        # Short: an endpoint down at start-up is asked again by the health poller.
        probe_s = max(0.5, min(2.0, settings.llm_connect_timeout_s))
        for e in self.balancer.endpoints:
            entry = self.client.model_entry(e.target, probe_s)
            self.balancer.set_max_model_len(e.url, window_of(entry))
            self._recognise(e, probe_s)
            self.balancer.set_served(e.url, served_identity(entry, e.server))
        if settings.llm_health_interval_s <= 0 and settings.llm_metrics_weighting:
            log.warning(
                "load weighting is off: QFARM_LLM_HEALTH_INTERVAL_S=0 stops /metrics polling"
            )
            for e in self.balancer.endpoints:
                self.balancer.set_metrics_problem(
                    e.url, "no /metrics polling (QFARM_LLM_HEALTH_INTERVAL_S=0)"
                )
        if settings.llm_health_interval_s > 0:
            self.balancer.enable_passive_health()
            self._poller = HealthPoller(
                self.client,
                self.balancer,
                settings.llm_health_interval_s,
                settings.llm_metrics_weighting,
            )

    def _recognise(self, e: EndpointState, timeout_s: float) -> None:
        """Adapt to a server that is not vLLM, said once in the log.

        See docs/llm.md, 'Other OpenAI-compatible servers': llama.cpp's Python server
        answers one request at a time, so more in flight would only queue inside it and
        time out there."""
        info = self.client.server_info(e.target, timeout_s)
        if info is None:
            return
        self.balancer.set_server(e.url, info.name, one_slot=info.one_slot, dialect=info.dialect)
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

    def stop(self) -> None:
        """Stop polling and fail the requests waiting for a slot ("the LLM gateway is closed")."""
        if self._poller is not None:
            self._poller.close()
        self.balancer.close()

    def close(self) -> None:
        self.client.close()


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
