"""`qfarm doctor`: Redis, workers, LLM endpoints, the index, the search cluster and the
installed packages, each checked with a short timeout, on one screen; ``ExitCode.FAILED``
when something a run needs is down. The checks are ``qfarm.producer.farm.doctor``."""

from __future__ import annotations

import argparse
import json

from qfarm.common.errors import InputError
from qfarm.common.settings import load_settings
from qfarm.common.vocab import ExitCode


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check Redis, workers, LLM endpoints, index and search cluster",
        description="Check every part of the farm these settings name (Redis, the workers per "
                    "queue and role, the LLM endpoints and the model each serves, the local "
                    "index, the search cluster, the installed packages), each with a short "
                    f"timeout. Exit codes: {ExitCode.OK:d} every needed part answers (warnings "
                    f"allowed), {ExitCode.FAILED:d} something a run needs is down or wrong, "
                    f"{ExitCode.USAGE:d} bad settings.",
    )
    p.add_argument("--timeout", type=float, default=3.0, metavar="S",
                   help="seconds each check may wait (default 3; workers: at most 1)")
    p.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.api import Health, diagnose

    if not 0 < args.timeout <= 60:
        raise InputError(f"--timeout {args.timeout:g}: seconds each check may wait, above 0 "
                         "and at most 60, e.g. --timeout 3")
    diagnosis = diagnose(load_settings(), timeout_s=args.timeout)
    if args.json:
        print(json.dumps(diagnosis.as_json(), ensure_ascii=False))
        return int(diagnosis.exit_code)
    width = max(len(c.name) for c in diagnosis.checks)
    for check in diagnosis.checks:
        print(f"{check.health.value:<4}  {check.name:<{width}}  {check.line}")
        for line in check.details:
            print(f"{'':<4}  {'':<{width}}    {line}")
        if check.fix and check.health != Health.OK:
            first, *more = check.fix.splitlines()
            print(f"{'':<4}  {'':<{width}}    -> {first}")
            for line in more:
                print(f"{'':<4}  {'':<{width}}       {line}")
    failed = [c.name for c in diagnosis.checks if c.health == Health.FAIL]
    warned = [c.name for c in diagnosis.checks if c.health == Health.WARN]
    if failed:
        print(f"down or wrong: {', '.join(failed)} (exit {int(diagnosis.exit_code)})")
    else:
        print("every part a run needs answers" + (f"; warnings: {', '.join(warned)}" if warned else ""))
    return int(diagnosis.exit_code)
