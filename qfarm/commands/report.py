"""`qfarm report RUN`: re-render a run's summary.md and plots from its rows file."""

from __future__ import annotations

import argparse
from pathlib import Path

from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="re-render summary.md and its plots for a run",
        description="Re-render RUN's summary.md and plots from manifest.json and rows.jsonl.",
    )
    p.add_argument(
        "run",
        metavar="RUN",
        help="a run directory, or a run id (or unique prefix) "
        "under QFARM_RESULTS_DIR (default ./qfarm-runs)",
    )
    p.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where run ids are looked up (default: QFARM_RESULTS_DIR)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.reports import resolve_run, write_summary  # matplotlib is slow to import

    results_dir = args.results_dir or load_settings().results_dir
    summary = write_summary(resolve_run(args.run, results_dir))
    print(f"summary: {summary}")
    return 0
