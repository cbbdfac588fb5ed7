"""`qfarm status [RUN_ID]`: runs and their progress, queue lengths, workers seen."""

from __future__ import annotations

import argparse
import time

from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show runs, progress, queue lengths and workers")
    p.add_argument("run_id", nargs="?")
    p.add_argument("--limit", type=int, default=10, help="how many recent runs to list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.api import farm_status

    status = farm_status(load_settings(), args.run_id, args.limit)
    for r in status.runs:
        if r.manifest is None or r.progress is None:
            print(f"{r.run_id}  failed    {r.error}")
            continue
        prog = r.progress
        age = time.time() - r.manifest.created_at
        stages = " ".join(f"{k}={v}" for k, v in prog.stages.items())
        print(f"{r.run_id}  {r.state:9s} {prog.done}/{prog.total} rows  failed={prog.failed}  "
              f"stages: {stages}  modes={','.join(m.value for m in r.manifest.modes)}  "
              f"age={age / 60:.1f} min")
        if prog.error:
            print(f"  error: {prog.error}")
    if not status.runs:
        print("no runs in Redis")
    print("queued messages: " + "  ".join(f"{q}={n}" for q, n in status.queued_messages.items())
          + f"  (sweep messages carry up to {status.bundle_size} jobs each)")
    print("\n".join(status.endpoints))
    if not status.workers:
        print("workers: none answered (start one: celery -A qfarm.worker worker -Q retrieve,verify)")
    for name, queues in status.workers.items():
        print(f"worker {name}: " + ",".join(queues))
    return 0
