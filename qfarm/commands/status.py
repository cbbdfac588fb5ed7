"""`qfarm status [RUN_ID]`: runs and their progress, queue lengths, workers seen."""

from __future__ import annotations

import argparse
import time

from common.errors import InputError, ManifestError
from common.runstatus import run_state
from common.settings import load_settings
from common.vocab import RunStatus


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show runs, progress, queue lengths and workers")
    p.add_argument("run_id", nargs="?")
    p.add_argument("--limit", type=int, default=10, help="how many recent runs to list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from common.urls import redact_url
    from producer.store import ProducerStore, connect
    from worker.celery_app import configure_app

    settings = load_settings()
    store = ProducerStore(connect(settings.redis_url))
    run_ids = [args.run_id] if args.run_id else store.run_ids(args.limit)
    for run_id in run_ids:
        try:
            manifest = store.manifest(run_id)
        except ManifestError as exc:
            print(f"{run_id}  {RunStatus.FAILED:9s} {exc}")
            continue
        if manifest is None:
            raise InputError(f"run {run_id}: not found in Redis ({redact_url(settings.redis_url)})")
        prog = store.progress(run_id, manifest.n_jobs)
        age = time.time() - manifest.created_at
        state = run_state(None, done=prog.done, total=prog.total, cancelled=prog.cancelled,
                          error=prog.error)
        stages = " ".join(f"{k}={v}" for k, v in prog.stages.items())
        print(f"{run_id}  {state:9s} {prog.done}/{prog.total} rows  failed={prog.failed}  "
              f"stages: {stages}  modes={','.join(m.value for m in manifest.modes)}  "
              f"age={age / 60:.1f} min")
        if prog.error:
            print(f"  error: {prog.error}")
    if not run_ids:
        print("no runs in Redis")
    lengths = store.queue_lengths()
    # Sweep messages are bundles of up to QFARM_BUNDLE_SIZE jobs; counting jobs would mean
    # reading every message, so this counts messages.
    print("queued messages: " + "  ".join(f"{q}={n}" for q, n in lengths.items())
          + f"  (sweep messages carry up to {settings.bundle_size} jobs each)")
    from worker.llm.gateway import endpoint_report

    print("\n".join(endpoint_report(settings)))
    app = configure_app(settings)
    replies = app.control.inspect(timeout=1.0).active_queues() or {}
    if not replies:
        print("workers: none answered (start one: celery -A worker worker -Q retrieve,verify)")
    for name, queues in sorted(replies.items()):
        print(f"worker {name}: " + ",".join(q["name"] for q in queues))
    return 0
