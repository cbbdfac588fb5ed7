"""Reports on disk: ``summary.md`` and ``compare.md`` with their PNG plots.

The I/O edge around the pure renderers in ``qfarm.common.reporting.report`` and
``qfarm.common.reporting.compare``: read ``manifest.json``, stream ``rows.jsonl`` line by line
(never loading it whole), draw plots with matplotlib's Agg canvas (no display,
no pyplot global state) and write markdown atomically. A plot that fails to
draw is logged and left out; the markdown is still written.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.reporting.compare import Comparison, MetricDelta, compare_runs, render_compare
from qfarm.common.reporting.cost import cost_summary
from qfarm.common.reporting.phase import CycleDecision, decide_cycle, render_cycle
from qfarm.common.reporting.report import recorded_pause_s, render_stats, run_wall_s
from qfarm.common.reporting.runstats import RunStats
from qfarm.common.reporting.stats import rate_interval
from qfarm.common.runstatus import run_status, status_text
from qfarm.producer.runs import (
    producer_alive,
    read_manifest,
    read_run_status,
    update_run_status,
    write_json_atomic,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
ROWS = "rows.jsonl"
SUMMARY = "summary.md"
COMPARE = "compare.md"
CYCLE = "cycle.md"
STRICT_PLOT = "strict_rate.png"
LATENCY_PLOT = "latency.png"
DELTA_PLOT = "compare_deltas.png"


# --------------------------------------------------------------------------- reading


class RowLine(NamedTuple):
    offset: int  # byte offset of the line in the file
    end: int  # byte offset just past it
    lineno: int  # counted from where reading started
    row: dict[str, Any] | None  # None: not a JSON object
    complete: bool  # ends in a newline (a live run may be writing the last one)


def iter_rows(rows_path: Path, start: int = 0) -> Iterator[RowLine]:
    """Every non-blank line of ``rows.jsonl`` from byte ``start``, parsed.

    The one parser of rows files: the summary, the comparison and the viewer's
    index all read through it. A missing file yields nothing.
    """
    try:
        fh = rows_path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        fh.seek(start)
        offset = start
        for lineno, raw in enumerate(fh, start=1):
            at, offset = offset, offset + len(raw)
            if raw.strip():
                yield RowLine(at, offset, lineno, parse_row(raw), raw.endswith(b"\n"))


def parse_row(raw: bytes) -> dict[str, Any] | None:
    """One row's JSON (a rows.jsonl line or a Redis rows-hash value), None if unreadable."""
    try:
        row = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def read_row_at(rows_path: Path, offset: int) -> dict[str, Any] | None:
    """The row that starts at byte ``offset`` (from ``iter_rows``), or None if unreadable."""
    with rows_path.open("rb") as fh:
        fh.seek(offset)
        return parse_row(fh.readline())


def read_stats(rows_path: Path) -> RunStats:
    """Stream ``rows.jsonl`` into ``RunStats``; a missing file is a run with no rows yet.

    Unparseable lines (e.g. a half-written last line of a live run) are counted
    and named in the summary, not fatal.
    """
    stats = RunStats()
    for line in iter_rows(rows_path):
        if line.row is None:
            stats.note_unreadable(line.lineno)
        else:
            stats.add(line.row)
    return stats


def read_run(run_dir: Path) -> tuple[Manifest, RunStats]:
    return read_manifest(run_dir), read_stats(run_dir / ROWS)


def resolve_run(ref: str, results_dir: Path) -> Path:
    """A run directory from a path, a run id under ``results_dir``, or a unique id prefix."""
    path = Path(ref)
    if path.is_dir():
        if not (path / MANIFEST).exists():
            raise InputError(f"{path}: not a run directory (no {MANIFEST} in it)")
        return path
    if (results_dir / ref / MANIFEST).exists():
        return results_dir / ref
    runs = (
        sorted(
            (p for p in results_dir.glob("*") if (p / MANIFEST).exists()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        if results_dir.is_dir()
        else []
    )
    matches = [p for p in runs if p.name.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches[:5])
        raise InputError(f"run id prefix {ref!r} is ambiguous in {results_dir}: {names}")
    recent = ", ".join(p.name for p in runs[:5]) or "none yet"
    raise InputError(
        f"no run {ref!r}: not a directory and not a run id in {results_dir} "
        f"(recent runs: {recent}); give a run directory or set QFARM_RESULTS_DIR"
    )


# --------------------------------------------------------------------------- plots


def _new_figure(width: float, height: float, *,
                margins: tuple[float, float, float, float] | None = None) -> Figure:  # fmt: skip
    """A figure of ``width`` x ``height`` inches; ``margins`` (left, bottom, right, top, in
    inches) place its one plot, else the constrained layout places it.

    Every run's summary draws two plots after its last row: fixed margins draw them in
    about half the CPU of the constrained layout, which measures every label first.
    """
    # Figure() without pyplot renders through the Agg canvas: no display, thread-safe.
    from matplotlib.figure import Figure

    if margins is None:
        return Figure(figsize=(width, height), dpi=100, layout="constrained")
    fig = Figure(figsize=(width, height), dpi=100)
    left, bottom, right, top = margins
    fig.subplots_adjust(left=left / width, bottom=bottom / height, right=1 - right / width,
                        top=1 - top / height)  # fmt: skip
    return fig


def plot_strict_rates(manifest: Manifest, stats: RunStats, path: Path) -> None:
    """Bar per mode: the headline strict-rate (over the jobs, an error row a failure) with
    its 95% interval (clustered by question when n > 1)."""
    modes = stats.mode_order(m.value for m in manifest.modes)
    fig = _new_figure(1.6 + 1.4 * len(modes), 3.6, margins=(0.75, 0.65, 0.15, 0.35))
    ax = fig.add_subplot()
    rates, lows, highs = [], [], []
    for mode in modes:
        t = stats.modes[mode].tally if mode in stats.modes else None
        k, n = t.proportion("strict_of_jobs") if t else (0, 0)
        rate = 100 * k / n if n else 0.0
        low, high = rate_interval(stats.clusters(mode, "strict_of_jobs"))
        rates.append(rate)
        lows.append(rate - 100 * low if n else 0.0)
        highs.append(100 * high - rate if n else 0.0)
    x = list(range(len(modes)))
    ax.bar(x, rates, color="#4c72b0", yerr=[lows, highs], capsize=6)
    ax.set_xticks(x, [m.replace("_", "_\n") for m in modes], fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("strict-rate of jobs, errors fail,\n% (95% interval)", fontsize=8)
    title = f"{manifest.run_id}: strict-rate by mode"
    ax.set_title(title + (" (SIMULATED)" if manifest.simulated else ""), fontsize=9)
    fig.savefig(path)


def fmt_axis_ms(ms: float, _pos: object = None) -> str:
    """A latency tick as a reader says it: ``20 ms``, ``500 ms``, ``2 s``, not ``10^3``."""
    if ms >= 1000:
        return f"{ms / 1000:g} s"
    return f"{ms:g} ms"


def latency_axis(ax: Any) -> None:
    """A log-scaled latency x axis whose ticks (1, 2, 5 per decade) read in ms and s."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(fmt_axis_ms))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_latency(manifest: Manifest, stats: RunStats, path: Path) -> None:
    """Empirical CDF of total latency per mode, from the bounded sketches."""
    modes = stats.mode_order(m.value for m in manifest.modes)
    fig = _new_figure(6.0, 3.6, margins=(0.75, 0.6, 0.2, 0.35))
    ax = fig.add_subplot()
    qs = [i / 200 for i in range(201)]
    drawn = False
    for mode in modes:
        sketch = stats.modes[mode].latency if mode in stats.modes else None
        if sketch is None or sketch.count == 0:
            continue
        # A sketch with values has every quantile; nan only satisfies the type.
        xs = [float("nan") if x is None else x for x in sketch.quantiles(qs)]
        ax.plot(xs, [100 * q for q in qs], label=f"{mode} (n={sketch.count})")
        drawn = True
    if drawn:
        latency_axis(ax)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no latency recorded", ha="center", va="center", transform=ax.transAxes)
    for q in (50, 95):
        ax.axhline(q, color="#999999", linewidth=0.6, linestyle="--")
    ax.set_xlabel("total latency per job (log scale); dashed: p50, p95")
    ax.set_ylabel("jobs at or below, %")
    ax.grid(True, alpha=0.3)
    title = f"{manifest.run_id}: latency distribution"
    ax.set_title(title + (" (SIMULATED)" if manifest.simulated else ""), fontsize=9)
    fig.savefig(path)


def error_bar(delta: float, low: float, high: float) -> tuple[float, float]:
    """The interval's reach below and above ``delta``, the ends drawn within ±100 points.
    A delta in percent of A's mean (mean claims per answer) can lie beyond 100: its bar then
    stops at the point instead of reaching back past it (matplotlib refuses a negative one)."""
    return max(delta - max(low, -100.0), 0.0), max(min(high, 100.0) - delta, 0.0)


def plot_deltas(cmp: Comparison, path: Path) -> None:
    """Each (mode, metric) delta with its 95% interval against the ±floor band."""
    cells = [(d, d.delta) for d in cmp.deltas if d.delta is not None and d.low is not None]
    fig = _new_figure(7.0, 1.2 + 0.28 * max(len(cells), 1))
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


def _draw(plots: dict[str, str], title: str, path: Path, draw: Callable[[Path], None]) -> None:
    try:
        draw(path)
    except OSError as exc:  # the disk, not the plot: say so without a traceback
        log.warning("could not write %s (%s)", path, exc.strerror or exc)
        return
    except Exception:  # a missing plot must not cost the operator the report
        log.warning("could not draw %s", path, exc_info=True)
        return
    plots[title] = path.name


# --------------------------------------------------------------------------- writing


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    os.replace(tmp, path)


def write_summary(run_dir: Path, *, finished_at: float | None = None,
                  status: dict | None = None, record_cost: bool = False) -> Path:  # fmt: skip
    """(Re)write ``summary.md`` and its plots in ``run_dir``; returns the summary's path.

    The end time is ``finished_at``, else the producer's ``status.json``, else
    the last row's ``finished_at``. ``status`` stands in for ``status.json``: a
    run that ends writes its summary before the status that says it ended, so a
    reader who sees "complete" finds the summary. ``record_cost``: also write what
    the run cost into its manifest (the run's end does).
    """
    run_dir = Path(run_dir)
    manifest, stats = read_run(run_dir)
    status = read_run_status(run_dir) if status is None else status
    if finished_at is None and isinstance(status.get("finished_at"), int | float):
        finished_at = float(status["finished_at"])
    plots: dict[str, str] = {}
    _draw(
        plots,
        "strict-rate by mode",
        run_dir / STRICT_PLOT,
        lambda p: plot_strict_rates(manifest, stats, p),
    )
    _draw(
        plots,
        "latency distribution",
        run_dir / LATENCY_PLOT,
        lambda p: plot_latency(manifest, stats, p),
    )
    text = summary_text(manifest, stats, status, plots, finished_at)
    path = run_dir / SUMMARY
    _write_atomic(path, text)
    if record_cost:
        write_cost(run_dir, manifest, stats, finished_at, recorded_pause_s(status))
        # The run's end: status.json says in words what its rows say.
        update_run_status(run_dir, **error_fields(shown_status(manifest, status, stats.jobs),
                                                  stats))
    return path


def error_fields(status: str, stats: RunStats) -> dict[str, Any]:
    """What status.json records of a run's error rows: how many, their share of the rows,
    and the status in words (``completed with errors (N, x %)``)."""
    errored = stats.error_rows
    return {"errored_rows": errored,
            "error_rate": round(errored / stats.rows, 6) if stats.rows else None,
            "status_text": status_text(status, errored=errored, rows=stats.rows)}


def summary_text(manifest: Manifest, stats: RunStats, status: dict[str, Any],
                 plots: dict[str, str], finished_at: float | None) -> str:
    """summary.md's text (``write_summary``'s, and ``qfarm verify``'s to render it again)."""
    return render_stats(
        manifest,
        stats,
        plots=plots,
        finished_at=finished_at,
        status=shown_status(manifest, status, stats.jobs),
        cancelled_jobs=_int_or_none(status.get("cancelled_jobs")),
        paused=recorded_pause_s(status),
    ) + _recovery_note(status) + _redis_note(manifest, stats, status)


def _redis_note(manifest: Manifest, stats: RunStats, status: dict[str, Any]) -> str:
    """A run read while Redis holds it: its rows there are ahead of rows.jsonl's."""
    in_redis = status.get("rows_in_redis")
    if status.get("source") != "redis" or not isinstance(in_redis, int):
        return ""
    return (
        "\n## Rows in Redis\n\n"
        f"Redis holds rows for {in_redis} of {manifest.n_jobs} jobs of this run (the status "
        f"above is Redis's); rows.jsonl holds {stats.jobs}, and the tables above are over "
        f"those. `qfarm sweep --attach {manifest.run_id}` writes the rest here.\n"
    )


def existing_plots(run_dir: Path) -> dict[str, str]:
    """The plots summary.md links, for those whose file is in ``run_dir``."""
    return {title: name for title, name in (("strict-rate by mode", STRICT_PLOT),
                                            ("latency distribution", LATENCY_PLOT))
            if (run_dir / name).exists()}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_cost(manifest: Manifest, stats: RunStats, finished_at: float | None,
             paused_s: float = 0.0) -> dict[str, Any]:
    """What the run cost, as JSON (``qfarm.common.reporting.cost.cost_summary``); the wall
    time leaves out ``paused_s`` (``recorded_pause_s``)."""
    modes = stats.mode_order(m.value for m in manifest.modes)
    return cost_summary(stats.cost, manifest.cost_rates,
                        run_wall_s(manifest, stats, finished_at, paused_s), modes)


def write_cost(run_dir: Path, manifest: Manifest, stats: RunStats,
               finished_at: float | None, paused_s: float = 0.0) -> None:
    """Record the run's cost in ``manifest.json`` (its ``cost``), the rest unchanged."""
    cost = run_cost(manifest, stats, finished_at, paused_s)
    write_json_atomic(run_dir / MANIFEST, manifest.model_copy(update={"cost": cost})
                      .model_dump(mode="json"))


def shown_status(manifest: Manifest, status: dict[str, Any], rows: int) -> str:
    """The run's status from its rows and its producer's process (``qfarm.common.runstatus``),
    not ``status.json``'s word copied."""
    recorded = status.get("status")
    if status.get("source") == "redis" and recorded:
        return str(recorded)  # Redis's word for a run it holds (``control.redis_state``)
    return run_status(str(recorded) if recorded else None, rows=rows, n_jobs=manifest.n_jobs,
                      eager=manifest.eager, producer_alive=producer_alive(status))


def _recovery_note(status: dict) -> str:
    """Where rows came back from after Redis lost them (``--resume``, a healing follower)."""
    counts = {k: status.get(k) for k in
              ("rows_recovered_from_file", "rows_recovered_from_redis", "rows_restored_to_redis")}
    if not any(isinstance(v, int) and v > 0 for v in counts.values()):
        return ""
    return (
        "\n## Recovery\n\n"
        f"- `--resume`: {counts['rows_recovered_from_file'] or 0} rows recovered from rows.jsonl "
        f"(written back to Redis), {counts['rows_recovered_from_redis'] or 0} from Redis "
        "(written to rows.jsonl)\n"
        f"- while following: {counts['rows_restored_to_redis'] or 0} rows of rows.jsonl written "
        "back to Redis after it lost them\n"
    )


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
    _write_atomic(path, render_cycle(cycle))
    return path


def write_comparison(cmp: Comparison, out_dir: Path) -> Path:
    """Write an already computed comparison (``compare.md`` + delta plot) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, str] = {}
    _draw(plots, "deltas against the floor", out_dir / DELTA_PLOT, lambda p: plot_deltas(cmp, p))
    path = out_dir / COMPARE
    _write_atomic(path, render_compare(cmp, plots=plots))
    return path


# --------------------------------------------------------------------------- machine-readable


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
