"""`qfarm cancel RUN_ID`: set the run's cancel flag and purge its pending messages.

Tasks check the flag before they start, so jobs not yet running end with no
row; jobs already past the check finish normally. The summary counts the jobs
left without a row as cancelled.
"""

from __future__ import annotations

import argparse
import time

from common.errors import InputError
from common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="cancel a distributed run")
    p.add_argument("run_id")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from producer.runs import update_run_status
    from producer.store import ProducerStore, connect

    settings = load_settings()
    store = ProducerStore(connect(settings.redis_url))
    manifest = store.manifest(args.run_id)
    if manifest is None:
        raise InputError(f"run {args.run_id}: not found in Redis; `qfarm status` lists runs")
    now = time.time()
    store.set_cancelled(args.run_id, now)
    purged = store.purge_run_messages(args.run_id)
    run_dir = settings.results_dir / args.run_id
    if run_dir.exists():
        update_run_status(run_dir, cancelled_at=now, purged_messages=purged)
    prog = store.progress(args.run_id, manifest.n_jobs)
    print(f"run {args.run_id} cancelled: purged {purged} pending messages; "
          f"{prog.done}/{prog.total} jobs have rows; the rest end without a row")
    return 0
