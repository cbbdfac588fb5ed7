"""`qfarm verify`: check a finished run's files against the record its manifest holds.

Prints one line per check; the checks are ``qfarm.producer.reports.record.verify_run``."""

from __future__ import annotations

import argparse
from pathlib import Path

from qfarm import runtime
from qfarm.common.settings import load_settings
from qfarm.producer.api import resolve_run, verify_run

MARKS = {True: "ok  ", False: "FAIL", None: "note"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check a run's files against the record in its manifest")
    p.add_argument("run", metavar="RUN_ID_OR_DIR", help="a run id, id prefix or run directory")
    p.add_argument("--questions", type=Path, default=None,
                   help="the run's question file, if it is no longer where the manifest says")
    p.add_argument("--public-key", type=Path, default=None, metavar="PEM",
                   help="the Ed25519 public key whose private key signs runs (QFARM_SIGNING_KEY): "
                        "checks record.sig, so the record is the one its holder wrote")
    p.add_argument("--out", type=runtime.results_dir_arg, default=None,
                   help="results directory (default QFARM_RESULTS_DIR, ./qfarm-runs)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    results = args.out if args.out is not None else settings.results_dir
    run_dir = resolve_run(args.run, results)
    checks = verify_run(run_dir, questions=args.questions, public_key=args.public_key)
    for check in checks:
        print(f"{MARKS[check.ok]}  {check.what}: {check.detail}")
    failed = [c.what for c in checks if c.ok is False]
    print(f"{run_dir.name}: " + ("verified, every check matches" if not failed
                                 else f"does NOT verify ({', '.join(failed)})"))
    return 1 if failed else 0
