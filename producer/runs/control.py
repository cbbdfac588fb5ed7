"""Run operations the CLI and the HTTP API share: cancel, describe one run, list runs.

A run is described from Redis while Redis holds it (progress per stage) and from its
directory (manifest.json, status.json) once it is only on disk, so a finished run
whose keys expired still answers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import InputError, ManifestError
from qfarm.common.models import Manifest
from qfarm.common.runstatus import StatusRecord, run_state, status_text
from qfarm.common.settings import Settings
from qfarm.common.vocab import RunStatus
from qfarm.producer.rundir import (
    producer_alive,
    question_set_name,
    read_manifest,
    read_status,
    run_kind,
    write_status,
)
from qfarm.producer.runs.aggregator import file_rows
from qfarm.producer.store import ProducerStore, connect

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cancelled:
    run_id: str
    purged: int  # messages this cancel removed from the queues
    done: int
    total: int
    purged_total: int = 0  # messages every cancel of this run removed so far
    cancelled_jobs: int = 0  # jobs stopped before they had a row, so far
    cancels: int = 1  # how many times the run was cancelled


# What a cancel can and cannot stop, said by `qfarm cancel`, the API and docs/distributed.md.
CANCEL_SCOPE = (
    "queued jobs are removed; bundles a worker already took stop at their next stage, and "
    "a taken bundle's model requests not yet answered are abandoned; requests already "
    "answered are verified and keep their rows; a worker that lost its connection to "
    "Redis finishes what it holds"
)


def cancel_run(store: ProducerStore, run_id: str, results_dir: Path) -> Cancelled:
    """Set the run's cancel flag and purge its pending messages (``qfarm cancel``).

    Counts are cumulative: a second cancel adds what it purged to the first one's and
    keeps the first cancel's time (``cancelled_at``; ``last_cancelled_at`` is the latest).
    """
    manifest = store.manifest(run_id)
    if manifest is None:
        raise InputError(f"run {run_id}: not found in Redis; `qfarm status` lists runs")
    now = time.time()
    store.set_cancelled(run_id, now)
    purged = store.purge_run_messages(run_id)
    counts = store.count_cancel(run_id)
    run_dir = results_dir / run_id
    if (run_dir / "manifest.json").exists():
        write_status(run_dir, read_status(run_dir).cancel_recorded(
            now, cancels=counts.cancels, purged_messages=counts.purged_messages,
            cancelled_jobs=counts.cancelled_jobs))
    prog = store.progress(run_id, manifest.n_jobs)
    return Cancelled(run_id, purged, prog.done, prog.total, purged_total=counts.purged_messages,
                     cancelled_jobs=prog.cancelled_jobs, cancels=counts.cancels)


def cancel(run_id: str, settings: Settings) -> Cancelled:
    """``cancel_run`` through the farm's Redis (``qfarm cancel``)."""
    return cancel_run(ProducerStore(connect(settings.redis_url)), run_id, settings.results_dir)


def describe_run(run_id: str, settings: Settings, store: ProducerStore | None) -> dict[str, Any]:
    """Manifest, status, progress per stage and an ETA, from Redis and/or the run directory."""
    run_dir = settings.results_dir / run_id
    manifest: Manifest | None = None
    if store is not None:
        manifest = store.manifest(run_id)  # a ManifestError (unreadable) goes to the caller
    on_disk = (run_dir / "manifest.json").exists()
    if manifest is None and on_disk:
        manifest = read_manifest(run_dir)
    if manifest is None:
        raise InputError(f"run {run_id}: not found in Redis or under {settings.results_dir.name}/")
    status = read_status(run_dir) if on_disk else StatusRecord()
    total = manifest.n_jobs
    in_redis = store is not None and store.has_manifest(run_id)
    if in_redis:
        assert store is not None
        prog = store.progress(run_id, total)
        done, failed, stages = prog.done, prog.failed, prog.stages
        cancelled, error = prog.cancelled, prog.error
    else:
        # Counted in rows.jsonl, not copied from status.json (the file may have lost rows).
        done = len({job_id for job_id, _ in file_rows(run_dir / "rows.jsonl")}) if on_disk else 0
        failed, stages = None, {}
        cancelled, error = status.cancelled_at is not None, status.error
    state = run_state(status.status, done=done, total=total,
                      cancelled=cancelled, error=error, from_rows=not in_redis,
                      eager=manifest.eager, producer_alive=producer_alive(status))
    errored = failed if failed is not None else status.errored_rows
    started = status.started_at or manifest.created_at
    elapsed = max(time.time() - float(started), 1e-9)
    eta_s = None
    if state == RunStatus.RUNNING and done:
        eta_s = round((total - done) / (done / elapsed), 1)
    return {
        "run_id": run_id,
        "state": state,
        # The state in words, error rows named: "completed with errors (N, x %)".
        "state_text": status_text(state, errored=errored, rows=done),
        "errored_rows": errored,
        "source": "redis" if in_redis else "disk",
        "progress": {"done": done, "total": total, "failed": failed, "stages": stages},
        "eta_s": eta_s,
        "error": error,
        "status": status.as_json(),
        "manifest": manifest.model_dump(mode="json"),
        "has_summary": (run_dir / "summary.md").exists(),
    }


def redis_state(run_id: str, settings: Settings, *, timeout_s: float = 1.0) -> dict[str, Any] | None:
    """What Redis holds of a distributed run, in ``describe_run``'s words (``state``,
    ``progress``: done, total, failed), or None when Redis does not hold the run or cannot
    be reached. ``qfarm report`` reads it: after ``--detach`` or a cancel, rows.jsonl and
    status.json lag behind Redis until a follower writes them."""
    import redis

    from qfarm.common.errors import ServiceUnreachableError
    from qfarm.producer.store import connect

    try:
        store = ProducerStore(connect(settings.redis_url, timeout_s=timeout_s))
        if not store.has_manifest(run_id):
            return None
        return describe_run(run_id, settings, store)
    except (ServiceUnreachableError, ManifestError, OSError, redis.exceptions.RedisError) as exc:
        log.debug("run %s: Redis not read (%s)", run_id, exc)
        return None


def list_runs(settings: Settings, store: ProducerStore | None, *, offset: int,
              limit: int, kind: str = "sweep") -> tuple[list[dict[str, Any]], int | None]:
    """Runs newest first (Redis's run index and the results directory, merged); a page of
    them and the next page's offset (None on the last page). ``kind``: ``sweep`` (the
    default: single questions would bury them), ``ask`` or ``all``."""
    created: dict[str, float] = {}
    if store is not None:
        pairs: list[tuple[bytes, float]] = store.client.zrevrange(  # type: ignore[assignment]
            keys.RUNS_KEY, 0, -1, withscores=True)
        for raw_id, score in pairs:
            created[raw_id.decode()] = float(score)
    results = settings.results_dir
    if results.is_dir():
        for path in results.iterdir():
            if path.name not in created and (path / "manifest.json").is_file():
                try:
                    created[path.name] = read_manifest(path).created_at
                except InputError:
                    continue
    ordered = sorted((r for r in created if kind in ("all", run_kind(r))),
                     key=lambda r: created[r], reverse=True)
    page = ordered[offset:offset + limit]
    items = []
    for run_id in page:
        try:
            info = describe_run(run_id, settings, store)
        except (InputError, ManifestError) as exc:
            items.append({"run_id": run_id, "state": "unreadable", "error": str(exc)})
            continue
        m = info["manifest"]
        items.append({
            "run_id": run_id, "kind": run_kind(run_id), "state": info["state"],
            "state_text": info["state_text"], "errored_rows": info["errored_rows"],
            "progress": info["progress"],
            "created_at": m["created_at"], "modes": m["modes"], "n": m["n"],
            "question_file": m["question_file"],
            "question_set": question_set_name(m["question_file"]), "simulated": m["simulated"],
            "source": info["source"], "eager": m["eager"],
        })
    nxt = offset + limit if offset + limit < len(ordered) else None
    return items, nxt


def summary_data(run_dir: Path) -> dict[str, Any]:
    """The summary's main figures as JSON: per mode, verdict counts and rates with 95%
    intervals (Wilson, or clustered by question when questions were sampled n > 1 times:
    ``interval``), violation kinds, labels, errors, cache hits and latency quantiles."""
    from qfarm.common.reporting.stats import interval_method, rate_interval
    from qfarm.producer.reports.rows import read_run

    manifest, stats = read_run(run_dir)
    modes = {}
    for name in stats.mode_order(m.value for m in manifest.modes):
        ms = stats.modes.get(name)
        if ms is None:
            continue
        t = ms.tally
        rates = {}
        for verdict in ("strict", "hybrid", "ungrounded"):
            k = getattr(t, verdict)
            clusters = stats.clusters(name, verdict)
            low, high = rate_interval(clusters) if t.valid else (None, None)
            rates[verdict] = {"count": k, "rate": k / t.valid if t.valid else None,
                              "ci95": [low, high], "interval": interval_method(clusters)}
        # The headline rates are over the jobs, an error row a failure ("verdicts" are over
        # the answered rows, "valid").
        of_jobs = {}
        for key, metric in (("strict", "strict_of_jobs"), ("errors", "errors")):
            k, n = t.proportion(metric)
            clusters = stats.clusters(name, metric)
            low, high = rate_interval(clusters) if n else (None, None)
            of_jobs[key] = {"count": k, "rate": k / n if n else None, "ci95": [low, high],
                            "interval": interval_method(clusters)}
        p50, p95 = ms.latency.quantiles([0.5, 0.95])
        modes[name] = {
            "rows": t.rows, "errors": t.errors, "valid": t.valid, "of_jobs": of_jobs,
            "verdicts": rates,
            "violation_kinds": dict(ms.kinds), "labels": dict(ms.labels),
            "cache_hits": ms.cache_hits,
            "latency_ms": {"p50": p50, "p95": p95},
        }
    return {
        "run_id": manifest.run_id,
        "simulated": manifest.simulated,
        "model": manifest.model,
        "llm_server": manifest.llm_server,
        "planned_jobs": manifest.n_jobs,
        "rows": stats.rows,
        "unreadable_lines": stats.unreadable,
        "errors": {kind: {"rows": count, "example": stats.error_examples.get(kind)}
                   for kind, count in stats.errors.most_common()},
        "modes": modes,
        "cost": _recorded_cost(run_dir, manifest, stats),
    }


def _recorded_cost(run_dir: Path, manifest: Manifest, stats: Any) -> dict[str, Any]:
    """The cost of a run on disk (``stats``: its ``RunStats``): its wall time ends at the
    recorded end and leaves out the time it stood paused between interrupts and resumes."""
    from qfarm.producer.reports.summary import run_cost

    status = read_status(run_dir)
    return run_cost(manifest, stats, status.finished_at, status.time_paused())


def live_cost(run_id: str, settings: Settings, store: ProducerStore | None) -> dict[str, Any]:
    """What a run has cost so far (``qfarm.common.reporting.cost``): from its rows.jsonl when it
    has a directory here, else from its rows in Redis (a run another host follows). One
    pass over the rows: for one run at a time (``qfarm status RUN``, ``GET /v1/runs/RUN``)."""
    from qfarm.common.reporting.runstats import RunStats
    from qfarm.producer.reports.rows import parse_row, read_run
    from qfarm.producer.reports.summary import run_cost

    run_dir = settings.results_dir / run_id
    if (run_dir / "manifest.json").exists():
        on_disk, stats = read_run(run_dir)
        return _recorded_cost(run_dir, on_disk, stats)
    manifest = store.manifest(run_id) if store is not None else None
    if store is None or manifest is None:
        raise InputError(f"run {run_id}: not found in Redis or under {settings.results_dir.name}/")
    stats = RunStats()
    for raw in store.read_rows(run_id, 0):
        row = parse_row(raw)
        if row is not None:
            stats.add(row)
    return run_cost(manifest, stats, None)
