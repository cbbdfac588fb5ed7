"""`qfarm compare RUN_A RUN_B`: is B better or worse than A, beyond noise?"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs per mode and metric (signal vs noise)",
        description=(
            "Write compare.md and a delta plot: per mode and metric, A, B, the delta in points "
            "with a 95%% interval (paired by question), and `signal` only when the delta clears "
            "the floor and its interval excludes zero."
        ),
    )
    p.add_argument("run_a", metavar="RUN_A", help="baseline run: a directory or a run id")
    p.add_argument("run_b", metavar="RUN_B", help="candidate run: a directory or a run id")
    p.add_argument(
        "--floor",
        type=float,
        default=5.0,
        help="smallest delta in points worth calling a signal (default 5)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for compare.md and its plot (default: RUN_B's directory)",
    )
    p.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where run ids are looked up (default: QFARM_RESULTS_DIR)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from common.compare import headline, phase_line
    from producer.reports import check_floor, compare_dirs, resolve_run, write_comparison

    check_floor(args.floor)
    results_dir = args.results_dir or load_settings().results_dir
    run_a = resolve_run(args.run_a, results_dir)
    run_b = resolve_run(args.run_b, results_dir)
    cmp = compare_dirs(run_a, run_b, args.floor)
    path = write_comparison(cmp, args.out or run_b)
    for warning in cmp.warnings:
        print(f"warning: {warning}")
    for line in headline(cmp):
        print(line)
    for line in cmp.mixed:
        print(f"mixed: {line}")
    for shift in cmp.intensity:
        if shift.drifted:
            print(f"drift: {shift.rung} {shift.share_a or 0:.1f}% → {shift.share_b or 0:.1f}% of questions")
    if cmp.phase is not None:
        print(f"phase: {phase_line(cmp.phase).replace('**', '')}")
    print(f"compare: {path}")
    return 0
