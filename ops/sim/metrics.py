"""Prometheus metrics under vLLM's names, rendered as text for ``GET /metrics``.

Gauges and histograms carry the ``model_name`` and ``engine`` labels as vLLM
0.33's do (vllm/v1/metrics/loggers.py), so a scraper written for vLLM reads
the simulator unchanged; ``--disable-log-stats`` leaves them all out, as vLLM
does. Counts are per
sequence (one prompt of a list is one engine request in vLLM too). Extra
``qfarm_sim_*`` series say the numbers are simulated.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
QUEUE_BUCKETS = E2E_BUCKETS


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += value
        self.n += 1

    def render(self, name: str, labels: str) -> list[str]:
        lines = [f"# TYPE {name} histogram"]
        acc = 0
        for bound, count in zip(self.buckets, self.counts, strict=True):
            acc += count
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {acc}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.n}")
        return lines


@dataclass
class Metrics:
    """Mutable counters of one simulator process (single event loop: no locks)."""

    running: int = 0
    waiting: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=dict)  # finish reason -> count
    http_requests: dict[str, int] = field(default_factory=dict)  # status -> count
    faults: dict[str, int] = field(default_factory=dict)
    max_concurrent_requests: int = 0
    open_requests: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(QUEUE_BUCKETS))

    def count_http(self, status: int) -> None:
        key = str(status)
        self.http_requests[key] = self.http_requests.get(key, 0) + 1

    def count_fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def render(
        self,
        model_name: str,
        max_num_seqs: int,
        *,
        vllm_series: bool = True,
        charged: Mapping[str, float] | None = None,
    ) -> str:
        """Prometheus text; without ``vllm_series`` (``--disable-log-stats``) only ours.
        ``charged``: the cost engine's counters (``engine.Charged``), under ``--latency cost``."""
        out = [
            "# qfarm vLLM simulator: every value below is SIMULATED, not from a real model server",
            "# TYPE qfarm_sim_simulated gauge",
            "qfarm_sim_simulated 1",
        ]
        if vllm_series:
            out += self._vllm_series(model_name, max_num_seqs)
        if charged is not None:
            out += cost_series(model_name, charged, vllm_series=vllm_series)
        out.append("# TYPE qfarm_sim_http_requests_total counter")
        for status, count in sorted(self.http_requests.items()):
            out.append(f'qfarm_sim_http_requests_total{{status="{status}"}} {count}')
        out.append("# TYPE qfarm_sim_faults_injected_total counter")
        for kind, count in sorted(self.faults.items()):
            out.append(f'qfarm_sim_faults_injected_total{{kind="{kind}"}} {count}')
        out.append("# TYPE qfarm_sim_max_concurrent_requests gauge")
        out.append(f"qfarm_sim_max_concurrent_requests {self.max_concurrent_requests}")
        return "\n".join(out) + "\n"

    def _vllm_series(self, model_name: str, max_num_seqs: int) -> list[str]:
        # vLLM 0.33 labels every series with model_name and engine (the engine index; one here).
        labels = f'engine="0",model_name="{model_name}"'
        out = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {self.running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {self.waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} {self.running / max(max_num_seqs, 1):.4f}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {self.prompt_tokens}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {self.generation_tokens}",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, count in sorted(self.success.items()):
            out.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {count}')
        out += self.ttft.render("vllm:time_to_first_token_seconds", labels)
        out += self.e2e.render("vllm:e2e_request_latency_seconds", labels)
        out += self.queue.render("vllm:request_queue_time_seconds", labels)
        return out


def cost_series(
    model_name: str, charged: Mapping[str, float], *, vllm_series: bool = True
) -> list[str]:
    """What the cost engine charged: vLLM 0.33's prefix-cache and prompt-source counters
    (vllm/v1/metrics/loggers.py: ``vllm:prefix_cache_queries``/``_hits`` in tokens,
    ``vllm:prompt_tokens_by_source``, ``vllm:prompt_tokens_cached``; prometheus_client adds
    ``_total``), and the model seconds charged under ``qfarm_sim_*`` names (vLLM has none)."""
    labels = f'engine="0",model_name="{model_name}"'
    out: list[str] = []
    if vllm_series:
        out += [
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{labels}}} {charged['prompt_tokens']}",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{{{labels}}} {charged['prompt_tokens_cached']}",
            "# TYPE vllm:prompt_tokens_by_source_total counter",
            f'vllm:prompt_tokens_by_source_total{{{labels},source="local_compute"}} '
            f"{charged['prompt_tokens_computed']}",
            f'vllm:prompt_tokens_by_source_total{{{labels},source="local_cache_hit"}} '
            f"{charged['prompt_tokens_cached']}",
            f'vllm:prompt_tokens_by_source_total{{{labels},source="external_kv_transfer"}} 0',
            "# TYPE vllm:prompt_tokens_cached_total counter",
            f"vllm:prompt_tokens_cached_total{{{labels}}} {charged['prompt_tokens_cached']}",
        ]
    out += [
        "# TYPE qfarm_sim_model_seconds_total counter",
        f'qfarm_sim_model_seconds_total{{phase="busy"}} {charged["busy_s"]}',
        f'qfarm_sim_model_seconds_total{{phase="prefill"}} {charged["prefill_s"]}',
        f'qfarm_sim_model_seconds_total{{phase="decode"}} {charged["decode_s"]}',
        "# TYPE qfarm_sim_engine_steps_total counter",
        f"qfarm_sim_engine_steps_total {charged['steps']}",
    ]
    return out
