"""What each export of a run costs, against the summary's own pass over its rows (measured in
the same process, so a busy machine shifts both).

Run: ``.venv/bin/python -m bench.perf.exports [--questions 5000] [--dir /tmp/qfarm-exports]``
(needs the exports' extras: ``make install-test``, or ``pip install -e '.[exports]'``).

Writes a synthetic run of ``--questions`` × 3 modes × 2 rows (its answers kept), then times
``read_stats`` (the pass over rows.jsonl every summary makes: the baseline), the Parquet
export (rows and answers), the trace export (every job, to the SDK's in-memory exporter, so
no collector's speed is in the figure) and the MLflow export (a fresh SQLite store: its
schema's creation is in the figure, as on a first export; the libraries are imported
before the clocks start); each is printed with its ratio
to the baseline and the files' sizes against rows.jsonl's.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from bench.perf.viewer import write_synthetic_run
from qfarm.producer.reports.rows import read_stats


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=5000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/qfarm-exports"))
    ap.add_argument("--quick", action="store_true", help="50 questions: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.questions = 50
    # The libraries are imported before the clocks start: the figures are the exports' work,
    # not the imports (mlflow's takes seconds; a command pays it once).
    import mlflow.tracking  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from qfarm.producer.reports.exports.mlflow import export_mlflow
    from qfarm.producer.reports.exports.parquet import export_parquet
    from qfarm.producer.reports.exports.traces import export_traces

    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    run_dir = write_synthetic_run(args.dir, "bench-run", args.questions)
    rows_bytes = (run_dir / "rows.jsonl").stat().st_size
    base_s = _timed(lambda: read_stats(run_dir / "rows.jsonl"))
    spans = InMemorySpanExporter()
    parquet_s = _timed(lambda: export_parquet(run_dir, args.dir / "parquet"))
    traces_s = _timed(lambda: export_traces(run_dir, sample_ratio=1.0, span_exporter=spans))
    uri = f"sqlite:///{args.dir / 'mlflow.db'}"
    mlflow_s = _timed(lambda: export_mlflow(run_dir, tracking_uri=uri))
    n_rows = sum(1 for _ in (run_dir / "rows.jsonl").open())
    parquet_bytes = sum(p.stat().st_size for p in (args.dir / "parquet").glob("*.parquet"))
    print(f"{n_rows} rows ({rows_bytes / 1e6:.1f} MB of rows.jsonl, answers kept); "
          f"Parquet files {parquet_bytes / 1e6:.1f} MB (x{parquet_bytes / rows_bytes:.2f}); "
          f"{len(spans.get_finished_spans())} spans")
    for name, secs in (("parquet", parquet_s), ("traces, every job", traces_s),
                       ("mlflow (new store)", mlflow_s), ("read_stats (baseline)", base_s)):
        print(f"  {name:<22} {secs:6.2f} s  x{secs / base_s:.2f} of read_stats")
    print(f"export_parquet_ratio={parquet_s / base_s:.2f}")


if __name__ == "__main__":
    main()
