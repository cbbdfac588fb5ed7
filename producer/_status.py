"""What ``qfarm status`` shows: the runs Redis holds with their progress, the queue
lengths, the LLM endpoints' state and the workers that answer."""

from __future__ import annotations

from dataclasses import dataclass

from qfarm.common.errors import InputError, ManifestError
from qfarm.common.models import Manifest
from qfarm.common.runstatus import run_state
from qfarm.common.settings import Settings
from qfarm.common.vocab import RunStatus
from qfarm.producer.store import Progress


@dataclass(frozen=True)
class RunProgress:
    """One run as Redis has it: its manifest and progress, or why its manifest is unreadable."""

    run_id: str
    state: str
    manifest: Manifest | None = None
    progress: Progress | None = None
    error: str | None = None


@dataclass(frozen=True)
class FarmStatus:
    runs: list[RunProgress]
    queued_messages: dict[str, int]  # sweep messages are bundles of up to ``bundle_size`` jobs
    bundle_size: int
    endpoints: list[str]  # one line per LLM endpoint
    workers: dict[str, list[str]]  # the queues each worker that answered consumes


def farm_status(settings: Settings, run_id: str | None = None, limit: int = 10) -> FarmStatus:
    """The farm as Redis and the workers report it: ``run_id``'s progress (InputError when
    Redis has no such run) or that of the ``limit`` most recent runs."""
    from qfarm.common.urls import redact_url
    from qfarm.producer.store import ProducerStore, connect
    from qfarm.worker.celery_app import configure_app
    from qfarm.worker.llm.pool import endpoint_report

    store = ProducerStore(connect(settings.redis_url))
    runs = []
    for rid in [run_id] if run_id else store.run_ids(limit):
        try:
            manifest = store.manifest(rid)
        except ManifestError as exc:
            runs.append(RunProgress(rid, RunStatus.FAILED, error=str(exc)))
            continue
        if manifest is None:
            raise InputError(f"run {rid}: not found in Redis ({redact_url(settings.redis_url)})")
        prog = store.progress(rid, manifest.n_jobs)
        state = run_state(None, done=prog.done, total=prog.total, cancelled=prog.cancelled,
                          error=prog.error)
        runs.append(RunProgress(rid, state, manifest, prog))
    # Sweep messages are bundles of up to QFARM_BUNDLE_SIZE jobs; counting jobs would mean
    # reading every message, so this counts messages.
    lengths = store.queue_lengths()
    endpoints = endpoint_report(settings)
    app = configure_app(settings)
    replies = app.control.inspect(timeout=1.0).active_queues() or {}
    workers = {name: [q["name"] for q in queues] for name, queues in sorted(replies.items())}
    return FarmStatus(runs, lengths, settings.bundle_size, endpoints, workers)
