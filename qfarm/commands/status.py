"""`qfarm status [RUN_ID]`: runs and their progress (from Redis, or from their directories),
queue lengths, workers seen."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from qfarm.common.reporting.cost import cost_line
from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status", help="show runs, progress, queue lengths and workers",
        description="Show runs (from Redis while it holds them, else from their directories "
                    "under the results directory: eager runs, finished runs, Redis down), "
                    "their progress, queue lengths, LLM endpoints and workers.",
    )
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="one run (default: the recent ones)")
    p.add_argument("--limit", type=int, default=10, help="how many recent runs to list (default 10)")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="where run directories are read (default: QFARM_RESULTS_DIR, ./qfarm-runs)")
    p.add_argument("--json", action="store_true", help="print the status as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.api import farm_status

    settings = load_settings()
    if args.results_dir is not None:
        settings = settings.model_copy(update={"results_dir": args.results_dir})
    status = farm_status(settings, args.run_id, args.limit)
    if args.json:
        print(json.dumps(status.as_json(), ensure_ascii=False))
        return 0
    if status.redis_error:
        print(f"{status.redis_error}: showing the run directories in {status.results_dir} "
              "only (no queues, no workers); start Redis or set QFARM_REDIS_URL to see the farm")
    for r in status.runs:
        if r.error and not r.total:
            print(f"{r.run_id}  failed    {r.error}")
            continue
        age = f"{(time.time() - r.created_at) / 60:.1f} min" if r.created_at else "?"
        stages = " ".join(f"{k}={v}" for k, v in r.stages.items())
        failed = "" if r.failed is None else f"  failed={r.failed}"
        where = "redis" if r.source == "redis" else f"disk ({'eager' if r.eager else 'distributed'})"
        print(f"{r.run_id}  {r.state_text or r.state:9s} {r.done}/{r.total} rows{failed}  "
              + (f"stages: {stages}  " if stages else "")
              + f"modes={','.join(r.modes)}  age={age}  from {where}")
        if r.error:
            print(f"  error: {r.error}")
        if r.cost is not None:
            print("  " + cost_line(r.cost))
    if not status.runs:
        print(f"no runs in Redis or in {status.results_dir}")
    if status.queued_messages is not None:
        print("queued messages: " + "  ".join(f"{q}={n}" for q, n in status.queued_messages.items())
              + f"  (sweep messages carry up to {status.bundle_size} jobs each)")
    print("\n".join(status.endpoints))
    if status.workers is None:
        return 0
    if not status.workers:
        print("workers: none answered (start one: celery -A qfarm.worker worker -Q retrieve,verify)")
    for name, queues in status.workers.items():
        print(f"worker {name}: " + ",".join(queues))
    return 0
