"""What ``qfarm status`` shows: runs with their progress, from Redis while it holds them and
from their directories under the results directory otherwise (an eager run never was in
Redis; a distributed run's keys expire), the queue lengths, the LLM endpoints' state and
the workers that answer. With Redis unreachable it shows what the run directories say."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError, ManifestError, ServiceUnreachableError
from qfarm.common.runstatus import status_text
from qfarm.common.settings import Settings
from qfarm.common.vocab import RunStatus
from qfarm.producer.runs.services import celery_app


@dataclass(frozen=True)
class RunProgress:
    """One run: its state and progress, read from Redis (``source`` "redis") or from its
    directory ("disk"), or why it could not be read (``error``, state failed)."""

    run_id: str
    state: str
    source: str = "redis"
    done: int = 0
    total: int = 0
    # Errored rows; None for a run listed from disk (listing does not read every rows file).
    failed: int | None = None
    stages: dict[str, int] = field(default_factory=dict)
    modes: tuple[str, ...] = ()
    created_at: float | None = None
    eager: bool | None = None
    error: str | None = None
    cost: dict | None = None  # what it has cost so far (``control.live_cost``), one run asked for
    # The state in words, error rows named ("completed with errors (N, x %)").
    state_text: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": str(self.state),
                "state_text": self.state_text or str(self.state), "source": self.source,
                "done": self.done, "total": self.total, "failed": self.failed,
                "stages": dict(self.stages), "modes": list(self.modes),
                "created_at": self.created_at, "eager": self.eager, "error": self.error,
                "cost": self.cost}


@dataclass(frozen=True)
class FarmStatus:
    runs: list[RunProgress]
    # None when Redis is unreachable (``redis_error`` says why): no queues or workers known.
    queued_messages: dict[str, int] | None  # sweep messages are bundles of up to ``bundle_size`` jobs
    bundle_size: int
    endpoints: list[str]  # one line per LLM endpoint
    workers: dict[str, list[str]] | None  # the queues each worker that answered consumes
    results_dir: Path
    redis_error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"runs": [r.as_json() for r in self.runs], "redis_error": self.redis_error,
                "queued_messages": self.queued_messages, "bundle_size": self.bundle_size,
                "endpoints": list(self.endpoints), "workers": self.workers,
                "results_dir": str(self.results_dir)}


def farm_status(settings: Settings, run_id: str | None = None, limit: int = 10) -> FarmStatus:
    """``run_id``'s progress (InputError when neither Redis nor the results directory has
    it) or that of the ``limit`` most recent runs of both, and what Redis and the workers
    report. Redis down is no error: the runs on disk are shown, and ``redis_error`` says
    what could not be read."""
    from qfarm.producer.runs.control import list_runs
    from qfarm.producer.store import ProducerStore, connect
    from qfarm.worker.llm.pool import endpoint_report

    store, redis_error = None, None
    try:
        store = ProducerStore(connect(settings.redis_url))
    except ServiceUnreachableError as exc:
        redis_error = _unreachable(settings, exc)
    if run_id:
        runs = [_one_run(run_id, settings, store, redis_error)]
    else:
        items, _ = list_runs(settings, store, offset=0, limit=limit)
        runs = [_from_item(item) for item in items]
    lengths = workers = None
    if store is not None:
        # Sweep messages are bundles of up to QFARM_BUNDLE_SIZE jobs; counting jobs would
        # mean reading every message, so this counts messages.
        lengths = store.queue_lengths()
        workers = _workers(settings)
    return FarmStatus(runs, lengths, settings.bundle_size, endpoint_report(settings), workers,
                      settings.results_dir, redis_error)


def _unreachable(settings: Settings, exc: ServiceUnreachableError) -> str:
    from qfarm.common.urls import redact_url

    cause = exc.__cause__
    why = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
    return f"Redis at {redact_url(settings.redis_url)} is unreachable ({why})"


def _one_run(run_id: str, settings: Settings, store: Any, redis_error: str | None) -> RunProgress:
    from qfarm.common.urls import redact_url
    from qfarm.producer.runs.control import describe_run, live_cost

    in_redis = store is not None and store.has_manifest(run_id)
    if not in_redis and not (settings.results_dir / run_id / "manifest.json").exists():
        where = settings.results_dir / run_id
        if redis_error:
            raise InputError(
                f"run {run_id}: no run directory {where}, and {redis_error} to look there; "
                "give the results directory the run wrote (--results-dir or QFARM_RESULTS_DIR), "
                "or start Redis (or point QFARM_REDIS_URL at it) for a distributed run"
            )
        raise InputError(
            f"run {run_id}: not found in Redis ({redact_url(settings.redis_url)}) nor in "
            f"{settings.results_dir} (no {where}/manifest.json); `qfarm status` lists runs, "
            "--results-dir (or QFARM_RESULTS_DIR) looks in another results directory"
        )
    from qfarm.producer.runs.outcome import count_rows

    try:
        info = describe_run(run_id, settings, store)
    except ManifestError as exc:
        return RunProgress(run_id, RunStatus.FAILED, error=str(exc))
    if info["source"] == "disk":  # one run: its errored rows are worth the read
        info["progress"]["failed"] = count_rows(settings.results_dir / run_id / "rows.jsonl")[1]
    # One run asked for: what it has cost so far is worth a pass over its rows.
    return replace(_from_item({**info, **info["manifest"]}),
                   cost=live_cost(run_id, settings, store))


def _from_item(item: dict[str, Any]) -> RunProgress:
    """A run as ``qfarm.producer.runs.control`` describes it (the HTTP API's words and figures)."""
    prog = item.get("progress")
    if prog is None:  # unreadable
        return RunProgress(item["run_id"], RunStatus.FAILED, error=item.get("error"))
    errored = prog["failed"] if prog["failed"] is not None else item.get("errored_rows")
    return RunProgress(
        item["run_id"], item["state"], source=item.get("source", "redis"), done=prog["done"],
        total=prog["total"], failed=prog["failed"], stages=dict(prog["stages"] or {}),
        modes=tuple(item.get("modes") or ()), created_at=item.get("created_at"),
        eager=item.get("eager"), error=item.get("error"),
        state_text=status_text(item["state"], errored=errored, rows=prog["done"]),
    )


def _workers(settings: Settings) -> dict[str, list[str]]:
    app = celery_app(settings)
    replies = app.control.inspect(timeout=1.0).active_queues() or {}
    return {name: [q["name"] for q in queues] for name, queues in sorted(replies.items())}
