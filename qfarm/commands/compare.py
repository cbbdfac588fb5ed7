"""`qfarm compare RUN_A RUN_B [RUN_C RUN_D]`: is B better or worse than A, beyond noise?

Two runs: compare.md, a delta plot and, when the runs differ in quantifier-phase
switches only, the phase decision. Four runs: the A/B/D cycle (neither, caps
only, reminder only, both, in any order) and its decision, in cycle.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs per mode and metric (signal vs noise), or decide an A/B/D cycle",
        description=(
            "Two runs: write compare.md and a delta plot: per mode and metric, A, B, the delta "
            "in points with a 95%% interval (paired by question), and `signal` only when the "
            "delta clears the floor and its interval excludes zero. Four runs (neither, caps "
            "only, reminder only, both; any order): write cycle.md with the caps, reminder and "
            "together-vs-alone decisions."
        ),
    )
    p.add_argument("run_a", metavar="RUN_A", help="baseline run: a directory or a run id")
    p.add_argument("run_b", metavar="RUN_B", help="candidate run: a directory or a run id")
    p.add_argument(
        "more",
        metavar="RUN",
        nargs="*",
        help="two more runs for an A/B/D cycle (four runs in all)",
    )
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
        help="directory for compare.md (or cycle.md) and its plot (default: the last run's directory)",
    )
    p.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where run ids are looked up (default: QFARM_RESULTS_DIR)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.common.errors import InputError
    from qfarm.common.reporting.compare import headline
    from qfarm.common.reporting.phase import cycle_lines, phase_line
    from qfarm.producer.reports import (
        check_floor,
        compare_cycle,
        compare_dirs,
        resolve_run,
        write_comparison,
        write_cycle,
    )

    check_floor(args.floor)
    if len(args.more) not in (0, 2):
        raise InputError(
            f"qfarm compare: got {2 + len(args.more)} runs; give two (A B) or the four runs of "
            "an A/B/D cycle (neither, caps only, reminder only, both)"
        )
    results_dir = args.results_dir or load_settings().results_dir
    dirs = [resolve_run(ref, results_dir) for ref in (args.run_a, args.run_b, *args.more)]
    if args.more:
        cycle = compare_cycle(dirs, args.floor)
        path = write_cycle(cycle, args.out or dirs[-1])
        for warning in cycle.warnings:
            print(f"warning: {warning}")
        for line in cycle_lines(cycle):
            print(line.replace("**", ""))
        print(f"cycle: {path}")
        return 0
    cmp = compare_dirs(dirs[0], dirs[1], args.floor)
    path = write_comparison(cmp, args.out or dirs[1])
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
        if cmp.phase.note:
            print(f"phase: {cmp.phase.note}")
    print(f"compare: {path}")
    return 0
