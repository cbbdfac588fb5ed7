"""A run's ``summary.md`` with its PNG plots, and its cost.

The I/O edge around the pure renderer in ``qfarm.common.reporting.report``: read
``manifest.json``, stream ``rows.jsonl`` (``rows``), draw plots with matplotlib's Agg canvas
(no display, no pyplot global state) and write markdown atomically. A plot that fails to
draw is logged and left out; the markdown is still written. ``compare`` draws and writes
through the same helpers.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qfarm.common.models import Manifest
from qfarm.common.reporting.cost import cost_summary
from qfarm.common.reporting.report import render_stats, run_wall_s
from qfarm.common.reporting.runstats import RunStats
from qfarm.common.reporting.stats import rate_interval
from qfarm.common.runstatus import StatusRecord, run_status
from qfarm.producer.reports.rows import MANIFEST, read_run
from qfarm.producer.rundir import (
    producer_alive,
    read_status,
    write_json_atomic,
    write_status,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)


SUMMARY = "summary.md"
STRICT_PLOT = "strict_rate.png"
LATENCY_PLOT = "latency.png"


def warm_plotting() -> None:
    """Import the plotting library on a daemon thread, once a process.

    Every run ends by drawing its summary's two plots, and the first drawing in a process
    first waits for matplotlib to import (about 0.4 s on two cores). A run calls this once
    it is under way (an eager run when its first rows land, a follower as it starts), so
    the import overlaps the run, whose process waits on the model most of the time, instead
    of adding to the command's tail after the last answer. Python's import lock makes a
    drawing that comes first wait for the import under way."""
    global _warming
    with _warming_lock:
        if _warming is not None:
            return
        _warming = threading.Thread(target=_import_plotting, name="qfarm-warm-plots",
                                    daemon=True)  # fmt: skip
    _warming.start()


def _import_plotting() -> None:
    try:
        import matplotlib.backends.backend_agg  # noqa: F401  (what Figure.savefig draws with)
        import matplotlib.figure  # noqa: F401
        import matplotlib.ticker  # noqa: F401
    except Exception:  # the drawing itself logs what is wrong, and the summary goes on
        log.debug("could not import matplotlib ahead of the plots", exc_info=True)


_warming: threading.Thread | None = None
_warming_lock = threading.Lock()


def new_figure(width: float, height: float, *,
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
    fig = new_figure(1.6 + 1.4 * len(modes), 3.6, margins=(0.75, 0.65, 0.15, 0.35))
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
    fig = new_figure(6.0, 3.6, margins=(0.75, 0.6, 0.2, 0.35))
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


def draw_plot(plots: dict[str, str], title: str, path: Path, draw: Callable[[Path], None]) -> None:
    try:
        draw(path)
    except OSError as exc:  # the disk, not the plot: say so without a traceback
        log.warning("could not write %s (%s)", path, exc.strerror or exc)
        return
    except Exception:  # a missing plot must not cost the operator the report
        log.warning("could not draw %s", path, exc_info=True)
        return
    plots[title] = path.name


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    os.replace(tmp, path)


def write_summary(run_dir: Path, *, finished_at: float | None = None,
                  status: StatusRecord | None = None, record_cost: bool = False) -> Path:  # fmt: skip
    """(Re)write ``summary.md`` and its plots in ``run_dir``; returns the summary's path.

    The end time is ``finished_at``, else the producer's ``status.json``, else
    the last row's ``finished_at``. ``status`` stands in for ``status.json``: a
    run that ends writes its summary before the status that says it ended, so a
    reader who sees "complete" finds the summary. ``record_cost``: also write what
    the run cost into its manifest, then ``status`` (its error rows counted) into
    ``status.json`` (the run's end does).
    """
    run_dir = Path(run_dir)
    manifest, stats = read_run(run_dir)
    status = read_status(run_dir) if status is None else status
    if finished_at is None and status.finished_at is not None:
        finished_at = status.finished_at
    plots: dict[str, str] = {}
    draw_plot(
        plots,
        "strict-rate by mode",
        run_dir / STRICT_PLOT,
        lambda p: plot_strict_rates(manifest, stats, p),
    )
    draw_plot(
        plots,
        "latency distribution",
        run_dir / LATENCY_PLOT,
        lambda p: plot_latency(manifest, stats, p),
    )
    text = summary_text(manifest, stats, status, plots, finished_at)
    path = run_dir / SUMMARY
    write_text_atomic(path, text)
    if record_cost:
        write_cost(run_dir, manifest, stats, finished_at, status.time_paused())
        # The run's end: status.json says in words what its rows say.
        write_status(run_dir, status.rows_counted(shown_status(manifest, status, stats.jobs),
                                                  errored=stats.error_rows, rows=stats.rows))
    return path


def summary_text(manifest: Manifest, stats: RunStats, status: StatusRecord,
                 plots: dict[str, str], finished_at: float | None) -> str:
    """summary.md's text (``write_summary``'s, and ``qfarm verify``'s to render it again)."""
    return render_stats(
        manifest,
        stats,
        plots=plots,
        finished_at=finished_at,
        status=shown_status(manifest, status, stats.jobs),
        cancelled_jobs=status.cancelled_jobs,
        paused=status.time_paused(),
    ) + _recovery_note(status) + _redis_note(manifest, stats, status)


def _redis_note(manifest: Manifest, stats: RunStats, status: StatusRecord) -> str:
    """A run read while Redis holds it: its rows there are ahead of rows.jsonl's."""
    in_redis = status.rows_in_redis
    if status.source != "redis" or in_redis is None:
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


def run_cost(manifest: Manifest, stats: RunStats, finished_at: float | None,
             paused_s: float = 0.0) -> dict[str, Any]:
    """What the run cost, as JSON (``qfarm.common.reporting.cost.cost_summary``); the wall
    time leaves out ``paused_s`` (``StatusRecord.time_paused``)."""
    modes = stats.mode_order(m.value for m in manifest.modes)
    return cost_summary(stats.cost, manifest.cost_rates,
                        run_wall_s(manifest, stats, finished_at, paused_s), modes)


def write_cost(run_dir: Path, manifest: Manifest, stats: RunStats,
               finished_at: float | None, paused_s: float = 0.0) -> None:
    """Record the run's cost in ``manifest.json`` (its ``cost``), the rest unchanged."""
    cost = run_cost(manifest, stats, finished_at, paused_s)
    write_json_atomic(run_dir / MANIFEST, manifest.model_copy(update={"cost": cost})
                      .model_dump(mode="json"))


def shown_status(manifest: Manifest, status: StatusRecord, rows: int) -> str:
    """The run's status from its rows and its producer's process (``qfarm.common.runstatus``),
    not ``status.json``'s word copied."""
    recorded = status.status
    if status.source == "redis" and recorded:
        return str(recorded)  # Redis's word for a run it holds (``control.redis_state``)
    return run_status(recorded, rows=rows, n_jobs=manifest.n_jobs,
                      eager=manifest.eager, producer_alive=producer_alive(status))


def _recovery_note(status: StatusRecord) -> str:
    """Where rows came back from after Redis lost them (``--resume``, a healing follower)."""
    counts = status.recovered()
    if not counts.has_any():
        return ""
    return (
        "\n## Recovery\n\n"
        f"- `--resume`: {counts.rows_recovered_from_file or 0} rows recovered from rows.jsonl "
        f"(written back to Redis), {counts.rows_recovered_from_redis or 0} from Redis "
        "(written to rows.jsonl)\n"
        f"- while following: {counts.rows_restored_to_redis or 0} rows of rows.jsonl written "
        "back to Redis after it lost them\n"
    )
