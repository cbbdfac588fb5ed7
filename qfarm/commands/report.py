"""`qfarm report RUN`: re-render a run's summary.md and plots from its rows file, and exit
as the run's sweep would have (a CI job re-checks a run after `qfarm sweep --detach`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qfarm.common.settings import load_settings
from qfarm.common.vocab import ExitCode


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="re-render summary.md and its plots for a run",
        description="Re-render RUN's summary.md and plots from manifest.json and rows.jsonl. "
                    "Exits as `qfarm sweep` would: 0 complete, 1 not complete (running, "
                    "incomplete, interrupted, cancelled, failed), 3 complete with errored rows "
                    "beyond --max-error-rate.",
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
    p.add_argument("--max-error-rate", type=float, default=None, metavar="R",
                   help=f"fraction of rows that may error before the exit code is {ExitCode.ROW_ERRORS:d} "
                        "(default: the rate the run's `qfarm sweep` was given, else 0)")
    p.add_argument("--json", action="store_true",
                   help="print the run's outcome as one JSON object (as `qfarm sweep --json`)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.api import check_error_rate, report_run, resolve_run

    if args.max_error_rate is not None:
        check_error_rate(args.max_error_rate)
    settings = load_settings()
    run_dir = resolve_run(args.run, args.results_dir or settings.results_dir)
    outcome = report_run(run_dir, settings, args.max_error_rate)
    if args.json:
        print(json.dumps(outcome.as_json(), ensure_ascii=False))
    else:
        print(f"summary: {run_dir / 'summary.md'}")
    if outcome.reason:
        print(outcome.reason, file=sys.stderr)
    return int(outcome.exit_code)
