"""`qfarm compare RUN_A RUN_B [RUN_C RUN_D]`: is B better or worse than A, beyond noise?

Two runs: compare.md, a delta plot and, when the runs differ in quantifier-phase
switches only, the phase decision. Four runs: the A/B/D cycle (neither, caps
only, reminder only, both, in any order) and its decision, in cycle.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qfarm.common.settings import load_settings
from qfarm.common.vocab import ExitCode


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs per mode and metric (signal vs noise), or decide an A/B/D cycle",
        description=(
            "Two runs: write compare.md and a delta plot: per mode and metric, A, B, the delta "
            "in points with a 95% interval (paired by question), and `signal` only when the "
            "delta clears the floor and its interval excludes zero. Four runs (neither, caps "
            "only, reminder only, both; any order): write cycle.md with the caps, reminder and "
            f"together-vs-alone decisions. Exit codes: {ExitCode.OK:d}, or with --fail-on-worse "
            f"{ExitCode.WORSE:d} when B is worse than A on some mode and metric (a `worse` "
            f"signal); {ExitCode.USAGE:d} bad input."
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
    p.add_argument(
        "--fail-on-worse",
        action="store_true",
        help=f"exit {ExitCode.WORSE:d} when B is worse than A beyond noise: a signal (the floor cleared, the "
        "interval excluding zero) in the wrong direction on any mode and metric",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the comparison as one JSON object (deltas, intervals, verdicts, "
        "warnings, regressions) instead of the text lines",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.common.errors import InputError
    from qfarm.common.reporting.compare import headline
    from qfarm.common.reporting.phase import phase_line
    from qfarm.producer.api import (
        check_floor,
        compare_dirs,
        comparison_json,
        regressions,
        resolve_run,
        write_comparison,
    )

    check_floor(args.floor)
    if len(args.more) not in (0, 2):
        raise InputError(
            f"qfarm compare: got {2 + len(args.more)} runs; give two (A B) or the four runs of "
            "an A/B/D cycle (neither, caps only, reminder only, both)"
        )
    if args.more and args.fail_on_worse:
        raise InputError("--fail-on-worse judges two runs (A B); a four-run cycle decides which "
                         "switches to turn on, with no better or worse run")
    results_dir = args.results_dir or load_settings().results_dir
    dirs = [resolve_run(ref, results_dir) for ref in (args.run_a, args.run_b, *args.more)]
    if args.more:
        return _cycle(args, dirs)
    cmp = compare_dirs(dirs[0], dirs[1], args.floor)
    path = write_comparison(cmp, args.out or dirs[1])
    worse = regressions(cmp)
    code = ExitCode.WORSE if args.fail_on_worse and worse else ExitCode.OK
    if args.json:
        print(json.dumps({**comparison_json(cmp), "path": str(path), "exit_code": int(code)},
                         ensure_ascii=False))
        return code
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
    if code == ExitCode.WORSE:
        print(f"worse: B ({cmp.run_b}) is worse than A ({cmp.run_a}) beyond noise on "
              + ", ".join(f"`{d.mode}` {d.metric.label}" for d in worse)
              + " (--fail-on-worse)", file=sys.stderr)
    return code


def _cycle(args: argparse.Namespace, dirs: list[Path]) -> int:
    from qfarm.common.reporting.phase import cycle_lines
    from qfarm.producer.api import compare_cycle, cycle_json, write_cycle

    cycle = compare_cycle(dirs, args.floor)
    path = write_cycle(cycle, args.out or dirs[-1])
    if args.json:
        print(json.dumps({**cycle_json(cycle), "path": str(path), "exit_code": 0},
                         ensure_ascii=False))
        return ExitCode.OK
    for warning in cycle.warnings:
        print(f"warning: {warning}")
    for line in cycle_lines(cycle):
        print(line.replace("**", ""))
    print(f"cycle: {path}")
    return ExitCode.OK
