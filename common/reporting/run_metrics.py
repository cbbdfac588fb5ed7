"""A run's headline numbers as flat metrics, for tools that track runs (MLflow).

The same numbers summary.md's 'Verdicts by mode' and cost tables show, from the same
``RunStats`` and cost summary: per mode the rates (percent, as the summary prints them) with
their 95% intervals, the mean ratio, latency percentiles and tokens per job; per run the
error rows and what the run cost. Keys are ``MODE/metric`` and ``run/metric``. Every run of
the same modes gives the same keys (a number a run lacks, e.g. latency without verdicts, is
NaN rather than missing), so tracked runs compare column for column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from qfarm.common.reporting.runstats import ModeStats, RunStats
from qfarm.common.reporting.stats import rate_interval

# (metric key, Tally.proportion metric): the rates of the summary's per-mode table.
RATES = (
    ("strict_rate_of_jobs", "strict_of_jobs"),
    ("error_rate_of_jobs", "errors"),
    ("strict_rate_of_answered", "strict"),
    ("ungrounded_rate_of_answered", "ungrounded"),
)
# The cost table's run line: (metric key, its field).
COST = (
    ("prompt_tokens", "prompt_tokens"),
    ("completion_tokens", "completion_tokens"),
    ("model_s", "model_s"),
    ("in_flight_s", "in_flight_s"),
    ("gpu_hours", "gpu_hours"),
    ("price_gpu", "price_gpu"),
    ("price_tokens", "price_tokens"),
)
NAN = float("nan")


def _num(x: float | int | None) -> float:
    return NAN if x is None else float(x)


def mode_metrics(stats: RunStats, mode: str) -> dict[str, float]:
    """One mode's numbers, keyed ``MODE/metric``."""
    m = stats.modes.get(mode) or ModeStats()
    t = m.tally
    out: dict[str, float] = {"jobs": float(t.rows), "strict": float(t.strict),
                             "hybrid": float(t.hybrid), "ungrounded": float(t.ungrounded),
                             "errors": float(t.errors)}
    for key, metric in RATES:
        k, n = t.proportion(metric)
        low, high = rate_interval(stats.clusters(mode, metric)) if n else (NAN, NAN)
        out[key] = 100 * k / n if n else NAN
        out[f"{key}_low"] = 100 * low
        out[f"{key}_high"] = 100 * high
    out["mean_ratio_of_answered"] = _num(t.ratio.mean)
    out["latency_p50_ms"] = _num(m.latency.quantile(0.5))
    out["latency_p95_ms"] = _num(m.latency.quantile(0.95))
    out["prompt_tokens_per_job"] = _num(m.prompt_tokens.mean)
    out["completion_tokens_per_job"] = _num(m.completion_tokens.mean)
    return {f"{mode}/{key}": value for key, value in out.items()}


def run_metrics(stats: RunStats, modes: Sequence[str],
                cost: Mapping[str, Any] | None) -> dict[str, float]:
    """Every mode's numbers and the run's (rows, error rows, error rate, cost)."""
    out: dict[str, float] = {}
    for mode in modes:
        out.update(mode_metrics(stats, mode))
    out["run/rows"] = float(stats.rows)
    out["run/error_rows"] = float(stats.error_rows)
    out["run/error_rate"] = 100 * stats.error_rows / stats.rows if stats.rows else NAN
    line = ((cost or {}).get("lines") or [{}])[0]
    for key, field in COST:
        value = line.get(field)
        out[f"run/{key}"] = float(value) if isinstance(value, int | float) else NAN
    return out
