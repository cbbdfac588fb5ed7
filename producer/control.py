"""Run operations the CLI and the HTTP API share: cancel, describe one run, list runs.

A run is described from Redis while Redis holds it (progress per stage) and from its
directory (manifest.json, status.json) once it is only on disk, so a finished run
whose keys expired still answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import InputError, ManifestError
from qfarm.common.models import Manifest
from qfarm.common.runstatus import run_state
from qfarm.common.settings import Settings
from qfarm.common.vocab import RunStatus
from qfarm.producer.aggregator import file_rows
from qfarm.producer.runs import producer_alive, read_manifest, read_run_status, update_run_status
from qfarm.producer.store import ProducerStore


@dataclass(frozen=True)
class Cancelled:
    run_id: str
    purged: int
    done: int
    total: int


def cancel_run(store: ProducerStore, run_id: str, results_dir: Path) -> Cancelled:
    """Set the run's cancel flag and purge its pending messages (``qfarm cancel``)."""
    manifest = store.manifest(run_id)
    if manifest is None:
        raise InputError(f"run {run_id}: not found in Redis; `qfarm status` lists runs")
    now = time.time()
    store.set_cancelled(run_id, now)
    purged = store.purge_run_messages(run_id)
    run_dir = results_dir / run_id
    if (run_dir / "manifest.json").exists():
        update_run_status(run_dir, cancelled_at=now, purged_messages=purged)
    prog = store.progress(run_id, manifest.n_jobs)
    return Cancelled(run_id, purged, prog.done, prog.total)


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
    status = read_run_status(run_dir) if on_disk else {}
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
        failed, stages, cancelled, error = None, {}, "cancelled_at" in status, status.get("error")
    recorded = status.get("status")
    state = run_state(str(recorded) if recorded else None, done=done, total=total,
                      cancelled=cancelled, error=error, from_rows=not in_redis,
                      eager=manifest.eager, producer_alive=producer_alive(status))
    started = status.get("started_at") or manifest.created_at
    elapsed = max(time.time() - float(started), 1e-9)
    eta_s = None
    if state == RunStatus.RUNNING and done:
        eta_s = round((total - done) / (done / elapsed), 1)
    return {
        "run_id": run_id,
        "state": state,
        "source": "redis" if in_redis else "disk",
        "progress": {"done": done, "total": total, "failed": failed, "stages": stages},
        "eta_s": eta_s,
        "error": error,
        "status": status,
        "manifest": manifest.model_dump(mode="json"),
        "has_summary": (run_dir / "summary.md").exists(),
    }


def list_runs(settings: Settings, store: ProducerStore | None, *, offset: int,
              limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """Runs newest first (Redis's run index and the results directory, merged); a page of
    them and the next page's offset (None on the last page)."""
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
    ordered = sorted(created, key=lambda r: created[r], reverse=True)
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
            "run_id": run_id, "state": info["state"], "progress": info["progress"],
            "created_at": m["created_at"], "modes": m["modes"], "n": m["n"],
            "question_file": m["question_file"], "simulated": m["simulated"],
        })
    nxt = offset + limit if offset + limit < len(ordered) else None
    return items, nxt


def summary_data(run_dir: Path) -> dict[str, Any]:
    """The summary's main figures as JSON: per mode, verdict counts and rates with 95%
    Wilson intervals, violation kinds, labels, errors, cache hits and latency quantiles."""
    from qfarm.common.reporting.stats import wilson_interval
    from qfarm.producer.reports import read_run

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
            low, high = wilson_interval(k, t.valid) if t.valid else (None, None)
            rates[verdict] = {"count": k, "rate": k / t.valid if t.valid else None,
                              "ci95": [low, high]}
        p50, p95 = ms.latency.quantiles([0.5, 0.95])
        modes[name] = {
            "rows": t.rows, "errors": t.errors, "valid": t.valid, "verdicts": rates,
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
    }
