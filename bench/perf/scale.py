"""How the farm's cost grows: jobs and passages at 10k, 100k, 1M, as curves.

Two tables and two log-log plots (PNG beside them, under ``--out``), each figure
with its growth exponent: the least-squares slope of log(figure) against log(size)
over the sizes measured. 1 is linear, 0 flat; the goal is <= 1.05 for every time
and count, and memory flat or bounded by a documented constant per row.

Jobs (``bench/perf/scale_jobs.py``): the general set × 3 modes × n on a
zero-latency simulator (SIMULATED), an eager sweep and a distributed one per size,
each distributed point on its own redis-server. Passages
(``bench/perf/scale_passages.py``): the default corpus enlarged by perturbed copies
of its articles, built into the embedded index and queried.

    python -m bench.perf.scale                          # 10k and 100k of both (minutes)
    python -m bench.perf.scale --jobs 10000,100000,1000000 --passages 10000,100000,1000000
    python -m bench.perf.scale --jobs 0 --passages 10000,100000     # passages only
    python -m bench.perf.scale --drivers eager                      # no Celery workers

The runs, corpora and indexes go to a temporary directory, removed at the end.
The last line is ``scale_max_exponent=<the largest exponent of a time or count>``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINEAR_BAR = 1.05

# A measured point: size -> figure name -> value (None: not measured at that size).
Points = dict[int, dict[str, float | None]]


def growth_exponent(sizes: Sequence[float], values: Sequence[float | None]) -> float | None:
    """Least-squares slope of log(value) on log(size); None with fewer than two positive points."""
    pairs = [(math.log(s), math.log(v)) for s, v in zip(sizes, values, strict=True)
             if v is not None and v > 0 and s > 0]
    if len(pairs) < 2:
        return None
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in pairs) / sxx


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def table(title: str, points: Points, units: dict[str, str], kinds: dict[str, str]) -> str:
    """Markdown table: one line per figure, one column per size, then the exponent."""
    sizes = sorted(points)
    lines = [f"### {title}", "",
             "| figure | " + " | ".join(f"{s:,}" for s in sizes) + " | exponent |",
             "|---|" + "---|" * (len(sizes) + 1)]
    for name, unit in units.items():
        values = [points[s].get(name) for s in sizes]
        if all(v is None for v in values):
            continue
        exp = growth_exponent(sizes, values)
        flag = ""
        if exp is not None and kinds.get(name) == "grows" and exp > LINEAR_BAR:
            flag = " **>1.05**"
        label = f"{name} ({unit})" if unit else name
        lines.append(f"| {label} | " + " | ".join(_fmt(v) for v in values)
                     + f" | {'—' if exp is None else f'{exp:.2f}'}{flag} |")
    return "\n".join(lines)


def max_exponent(points: Points, kinds: dict[str, str]) -> float | None:
    """The largest exponent among figures expected to grow with the size (times, counts)."""
    sizes = sorted(points)
    exps = [growth_exponent(sizes, [points[s].get(n) for s in sizes])
            for n, k in kinds.items() if k == "grows"]
    found = [e for e in exps if e is not None]
    return max(found) if found else None


def plot(title: str, points: Points, units: dict[str, str], path: Path, xlabel: str) -> None:
    """Each figure over its value at the smallest size, log-log, with y = x for reference."""
    from matplotlib.figure import Figure

    sizes = sorted(points)
    if len(sizes) < 2:
        return
    fig = Figure(figsize=(9.0, 6.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ratio = [s / sizes[0] for s in sizes]
    ax.plot(ratio, ratio, color="black", linewidth=1.2, linestyle="--", label="linear (exponent 1)")
    for name in units:
        values = [points[s].get(name) for s in sizes]
        base = next((v for v in values if v), None)
        pairs = [(r, v / base) for r, v in zip(ratio, values, strict=True) if v and base]
        if len(pairs) < 2:
            continue
        exp = growth_exponent(sizes, values)
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o", linewidth=1,
                label=f"{name}: {exp:.2f}" if exp is not None else name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"{xlabel} ÷ {sizes[0]:,} (log)")
    ax.set_ylabel("figure ÷ its value at the smallest size (log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    ax.set_title(title, fontsize=9)
    fig.savefig(path)


def _sizes(text: str) -> list[int]:
    out = sorted({int(float(t)) for t in text.split(",") if t.strip() and float(t) > 0})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="10000,100000",
                    help="job counts, comma-separated (0: no jobs section)")
    ap.add_argument("--passages", default="10000,100000",
                    help="passage counts, comma-separated (0: no passages section)")
    ap.add_argument("--drivers", default="eager,distributed",
                    help="which sweeps to run at each job count: eager, distributed or both")
    ap.add_argument("--questions", type=int, default=None,
                    help="sweep only the first N questions of the general set (the quick test)")
    ap.add_argument("--eager-up-to", type=int, default=None,
                    help="run the eager sweep only at job counts up to this one")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scale",
                    help="where the tables (scale.md) and the plots go")
    ap.add_argument("--queries", type=int, default=300,
                    help="generated questions timed per passage count")
    ap.add_argument("--heldout", type=int, default=1000,
                    help="questions of independent_heldout.jsonl judged for recall@8 (0: none)")
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of the queries at the largest passage count")
    ap.add_argument("--quick", action="store_true",
                    help="30 and 60 jobs (eager, 10 questions), 1,000 and 2,000 passages, 20 "
                         "queries: checks the script runs (tests/bench/test_perf_scale.py)")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs, args.questions, args.drivers = "30,60", 10, "eager"
        args.passages, args.queries, args.heldout = "1000,2000", 20, 20
    if args.child:
        from bench.perf.scale_children import run_child

        return run_child(args.child)
    from bench.perf.farmkit import exit_on_sigterm

    exit_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="qfarm-scale-"))
    try:
        return _measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # gigabytes of runs and indexes at 1M


def _measure(args: argparse.Namespace, work: Path) -> int:
    sections: list[str] = []
    worst: list[float] = []
    job_sizes, passage_sizes = _sizes(args.jobs), _sizes(args.passages)
    print(f"scale benchmark: jobs {job_sizes or 'none'}, passages {passage_sizes or 'none'}; "
          f"work dir {work}", flush=True)
    if job_sizes:
        from bench.perf import scale_jobs

        drivers = [d.strip() for d in args.drivers.split(",") if d.strip()]
        points = scale_jobs.measure(job_sizes, drivers, work, eager_up_to=args.eager_up_to,
                                    questions=args.questions)
        text = table("Jobs (SIMULATED LLM, zero latency)", points, scale_jobs.UNITS,
                     scale_jobs.KINDS)
        plot("jobs: each figure ÷ its smallest-size value (SIMULATED LLM)", points,
             scale_jobs.UNITS, args.out / "scale_jobs.png", "jobs")
        sections.append(text + "\n\n![jobs](scale_jobs.png)")
        print("\n" + text, flush=True)
        if (e := max_exponent(points, scale_jobs.KINDS)) is not None:
            worst.append(e)
    if passage_sizes:
        from bench.perf import scale_passages

        points = scale_passages.measure(passage_sizes, work, queries=args.queries,
                                        heldout=args.heldout, profile=args.profile)
        text = table("Passages (embedded index)", points, scale_passages.UNITS,
                     scale_passages.KINDS)
        plot("passages: each figure ÷ its smallest-size value", points, scale_passages.UNITS,
             args.out / "scale_passages.png", "passages")
        sections.append(text + "\n\n![passages](scale_passages.png)")
        print("\n" + text, flush=True)
        if (e := max_exponent(points, scale_passages.KINDS)) is not None:
            worst.append(e)
    (args.out / "scale.md").write_text(
        "# qfarm scale benchmark\n\nExponent: slope of log(figure) on log(size); 1 is linear, "
        "0 flat.\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    print(f"\ntables: {args.out / 'scale.md'}; plots beside it")
    print(f"scale_max_exponent={max(worst):.3f}" if worst else "scale_max_exponent=nan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
