"""`qfarm export RUN --parquet DIR` / `--mlflow`: a finished run where its users look
(``qfarm.producer.reports.exports``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from qfarm.common.errors import InputError
from qfarm.common.settings import Settings, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a run's rows as Parquet, or the run to MLflow",
        description="Export RUN: --parquet DIR writes rows.parquet (and answers.parquet when "
                    "the run kept answers) with each column's meaning in its metadata (extra "
                    "qfarm[parquet]); --mlflow logs the run as one MLflow run: params, tags, "
                    "the summary's numbers as metrics, summary.md, plots, manifest and rows "
                    "as artifacts (extra qfarm[mlflow]); --otlp sends each job as an "
                    "OpenTelemetry trace, built from its row (extra qfarm[otel]). Each export "
                    "is recorded in the run's exports.json.",
    )
    p.add_argument("run", metavar="RUN",
                   help="a run directory, or a run id (or unique prefix) under "
                        "QFARM_RESULTS_DIR (default ./qfarm-runs)")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="where run ids are looked up (default: QFARM_RESULTS_DIR)")
    p.add_argument("--parquet", type=Path, metavar="DIR",
                   help="write the run's rows as Parquet files into DIR")
    add_mlflow_flags(p, flag="--mlflow")
    add_otlp_flags(p, flag="--otlp")
    p.add_argument("--json", action="store_true",
                   help="print each export's record (as exports.json holds it) as one JSON line")
    p.set_defaults(func=run)


def add_mlflow_flags(p: argparse.ArgumentParser, *, flag: str | None) -> None:
    """The MLflow options (`qfarm export --mlflow`, `qfarm sweep --export mlflow`)."""
    if flag:
        p.add_argument(flag, action="store_true", help="log the run to MLflow")
    p.add_argument("--tracking-uri", metavar="URI", default=None,
                   help="MLflow tracking URI, e.g. sqlite:///mlflow.db or http://host:5000 "
                        "(default: MLFLOW_TRACKING_URI, else MLflow's own default)")
    p.add_argument("--experiment", metavar="NAME", default=None,
                   help="MLflow experiment (default: MLFLOW_EXPERIMENT_NAME, else qfarm)")


def add_otlp_flags(p: argparse.ArgumentParser, *, flag: str | None) -> None:
    """The trace options (`qfarm export --otlp`, `qfarm sweep --export otlp`)."""
    if flag:
        p.add_argument(flag, action="store_true",
                       help="send each job as an OpenTelemetry trace over OTLP/HTTP")
    p.add_argument("--otlp-endpoint", metavar="URL", default=None,
                   help="the collector's OTLP/HTTP base URL, e.g. http://localhost:4318 "
                        "(default: OTEL_EXPORTER_OTLP_ENDPOINT)")
    p.add_argument("--trace-sample-ratio", metavar="R", type=float, default=None,
                   help="fraction of jobs traced, the same jobs on every export (default: "
                        "every job of a run of up to 1,000 jobs, about 1,000 of a larger one; "
                        "QFARM_OTEL_SAMPLE_RATIO)")


def sample_ratio(args: argparse.Namespace, settings: Settings) -> float | None:
    """--trace-sample-ratio, else QFARM_OTEL_SAMPLE_RATIO, else None (the export's default)."""
    return args.trace_sample_ratio if args.trace_sample_ratio is not None \
        else settings.otel_sample_ratio


def is_tracing_on(settings: Settings) -> bool:
    """QFARM_OTEL=1, or an OTLP endpoint in the environment: sweeps send their traces."""
    return settings.otel or bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def experiment_name(args: argparse.Namespace) -> str:
    return args.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "qfarm"


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.api import export_mlflow, export_parquet, export_traces, resolve_run

    if not args.parquet and not args.mlflow and not args.otlp:
        raise InputError("qfarm export: say where to: --parquet DIR, --mlflow and/or --otlp")
    settings = load_settings()
    run_dir = resolve_run(args.run, args.results_dir or settings.results_dir)
    entries = []
    if args.parquet:
        entry = export_parquet(run_dir, args.parquet)
        entries.append(entry)
        if not args.json:
            files = ", ".join(f"{name} ({n} rows)" for name, n in entry["files"].items())
            print(f"parquet: {entry['path']}: {files}")
    if args.mlflow:
        entry = export_mlflow(run_dir, tracking_uri=args.tracking_uri,
                              experiment=experiment_name(args))
        entries.append(entry)
        if not args.json:
            print(f"mlflow: run {entry['mlflow_run_id']} in experiment {entry['experiment']!r} "
                  f"at {entry['tracking_uri']}")
    if args.otlp:
        entry = export_traces(run_dir, endpoint=args.otlp_endpoint,
                              sample_ratio=sample_ratio(args, settings))
        entries.append(entry)
        if not args.json:
            print(f"otlp: {entry['jobs_traced']} of {entry['rows']} jobs sent as traces "
                  f"(sample ratio {entry['sample_ratio']:g}) to {entry['endpoint']}")
    for entry in entries:
        if args.json:
            print(json.dumps(entry, ensure_ascii=False))
    return 0
