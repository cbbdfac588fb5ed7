"""`qfarm cancel RUN_ID`: set the run's cancel flag and purge its pending messages.

Tasks check the flag before they start, so jobs not yet running end with no
row; jobs already past the check finish normally. The summary counts the jobs
left without a row as cancelled.
"""

from __future__ import annotations

import argparse

from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="cancel a distributed run")
    p.add_argument("run_id")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.control import cancel_run
    from qfarm.producer.store import ProducerStore, connect

    settings = load_settings()
    done = cancel_run(ProducerStore(connect(settings.redis_url)), args.run_id, settings.results_dir)
    print(f"run {done.run_id} cancelled: purged {done.purged} pending messages; "
          f"{done.done}/{done.total} jobs have rows; the rest end without a row")
    return 0
