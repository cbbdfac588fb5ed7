"""Two runs compared on disk (``compare.md`` with its delta plot, ``--json``) and the
four runs of a decision cycle (``cycle.md``), over the pure renderers in
``qfarm.common.reporting.compare`` and ``qfarm.common.reporting.phase``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError
from qfarm.common.reporting.compare import Comparison, MetricDelta, compare_runs, render_compare
from qfarm.common.reporting.phase import CycleDecision, decide_cycle, render_cycle
from qfarm.producer.reports.rows import read_run
from qfarm.producer.reports.summary import draw_plot, new_figure, write_text_atomic

COMPARE = "compare.md"
CYCLE = "cycle.md"
DELTA_PLOT = "compare_deltas.png"


def error_bar(delta: float, low: float, high: float) -> tuple[float, float]:
    """The interval's reach below and above ``delta``, the ends drawn within ±100 points.
    A delta in percent of A's mean (mean claims per answer) can lie beyond 100: its bar then
    stops at the point instead of reaching back past it (matplotlib refuses a negative one)."""
    return max(delta - max(low, -100.0), 0.0), max(min(high, 100.0) - delta, 0.0)


def plot_deltas(cmp: Comparison, path: Path) -> None:
    """Each (mode, metric) delta with its 95% interval against the ±floor band."""
    cells = [(d, d.delta) for d in cmp.deltas if d.delta is not None and d.low is not None]
    fig = new_figure(7.0, 1.2 + 0.28 * max(len(cells), 1))
    ax = fig.add_subplot()
    colors = {"better": "#2a9d4b", "worse": "#c0392b"}
    for i, (d, delta) in enumerate(cells):
        below, above = error_bar(delta, d.low or 0.0, d.high or 0.0)
        color = colors.get(d.effect, "#7f7f7f")
        ax.errorbar(delta, i, xerr=[[below], [above]], fmt="o", color=color, capsize=3)
    ax.axvspan(-cmp.floor, cmp.floor, color="#dddddd", alpha=0.6, label=f"±{cmp.floor:g} pp floor")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(cells)), [f"{d.mode} · {d.metric.label}" for d, _ in cells], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(
        "Δ = B − A in points, 95% interval\ngreen: better signal · red: worse signal · grey: noise"
    )
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{cmp.run_a} → {cmp.run_b}", fontsize=9)
    fig.savefig(path)


def compare_dirs(run_a: Path, run_b: Path, floor: float = 5.0) -> Comparison:
    manifest_a, stats_a = read_run(Path(run_a))
    manifest_b, stats_b = read_run(Path(run_b))
    return compare_runs(manifest_a, stats_a, manifest_b, stats_b, floor=floor)


def check_floor(floor: float) -> None:
    """The compare floor as given on the command line: points, finite, not negative (a
    ``nan`` floor would call nothing a signal, an ``inf`` one neither, silently)."""
    if not math.isfinite(floor) or floor < 0:
        raise InputError(
            f"--floor {floor}: the floor is in points, a finite number >= 0, e.g. --floor 5"
        )


def compare_cycle(run_dirs: list[Path], floor: float = 5.0) -> CycleDecision:
    """The A/B/D decision over four run directories (any order: roles come from the policies)."""
    return decide_cycle([read_run(Path(d)) for d in run_dirs], floor=floor)


def write_cycle(cycle: CycleDecision, out_dir: Path) -> Path:
    """Write ``cycle.md`` into ``out_dir``; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CYCLE
    write_text_atomic(path, render_cycle(cycle))
    return path


def write_comparison(cmp: Comparison, out_dir: Path) -> Path:
    """Write an already computed comparison (``compare.md`` + delta plot) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, str] = {}
    draw_plot(plots, "deltas against the floor", out_dir / DELTA_PLOT, lambda p: plot_deltas(cmp, p))
    path = out_dir / COMPARE
    write_text_atomic(path, render_compare(cmp, plots=plots))
    return path


def regressions(cmp: Comparison) -> list[MetricDelta]:
    """The deltas where B is worse than A beyond noise: signals (the floor cleared, the
    interval excluding zero) on a metric with a better direction, in the wrong one
    (``qfarm compare --fail-on-worse``)."""
    return [d for d in cmp.signals if d.effect == "worse"]


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """``qfarm compare --json``: every delta with its interval and verdict, the warnings,
    and the regressions ``--fail-on-worse`` fails on."""
    from qfarm.common.reporting.phase import phase_line

    def delta(d: MetricDelta) -> dict[str, Any]:
        return {"mode": d.mode, "metric": d.metric.key, "label": d.metric.label, "a": d.a,
                "b": d.b, "n_a": d.n_a, "n_b": d.n_b, "delta": d.delta, "low": d.low,
                "high": d.high, "method": d.method, "verdict": str(d.verdict),
                "effect": None if d.effect == "—" else d.effect}

    return {
        "run_a": cmp.run_a,
        "run_b": cmp.run_b,
        "floor": cmp.floor,
        "simulated": cmp.manifest_a.simulated or cmp.manifest_b.simulated,
        "deltas": [delta(d) for d in cmp.deltas],
        "signals": [delta(d) for d in cmp.signals],
        "regressions": [delta(d) for d in regressions(cmp)],
        "warnings": list(cmp.warnings),
        "mixed": list(cmp.mixed),
        "phase": phase_line(cmp.phase).replace("**", "") if cmp.phase is not None else None,
    }


def cycle_json(cycle: CycleDecision) -> dict[str, Any]:
    """``qfarm compare --json`` of the four runs of an A/B/D cycle: roles and decision."""
    from qfarm.common.reporting.phase import cycle_lines

    return {
        "runs": dict(cycle.runs),
        "outcome": cycle.outcome,
        "why": cycle.why,
        "lines": [line.replace("**", "") for line in cycle_lines(cycle)],
        "warnings": list(cycle.warnings),
    }
