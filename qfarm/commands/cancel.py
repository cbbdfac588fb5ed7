"""`qfarm cancel RUN_ID`: set the run's cancel flag and purge its pending messages.

Tasks check the flag before each stage, and the generate stage while its bundle's
model requests are out, so jobs not yet answered end with no row and are counted
as cancelled; answers already in are verified and keep their rows. Counts are
cumulative over repeated cancels (docs/distributed.md).
"""

from __future__ import annotations

import argparse

from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="cancel a distributed run")
    p.add_argument("run_id")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.api import CANCEL_SCOPE, cancel

    done = cancel(args.run_id, load_settings())

    again = f" (cancel #{done.cancels}, {done.purged_total} purged in all)" if done.cancels > 1 else ""
    print(f"run {done.run_id} cancelled: purged {done.purged} pending messages{again}; "
          f"{done.done}/{done.total} jobs have rows, {done.cancelled_jobs} counted as cancelled "
          f"so far (jobs still in a worker's hands land as rows or join the cancelled count)")
    print(f"what a cancel stops: {CANCEL_SCOPE}")
    return 0
