"""Thin Celery tasks: take a bundle of jobs, call worker.flow, dispatch the next stage.

Retries are declared here for broker/row-store hiccups only (the whole bundle is
retried; jobs that already have a row are skipped); LLM retries live in the
gateway alone (one retry layer, not three). Any other exception becomes an
error row per job, so a failed job never leaves its sweep waiting forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.jobs import bundle_label
from common.models import JobRecord
from worker import flow
from worker.celery_app import app
from worker.flow import REDIS_ERRORS
from worker.services import Services, get_services

log = logging.getLogger("qfarm.worker")

TASK_OPTIONS = {
    "ignore_result": True,
    "autoretry_for": REDIS_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "max_retries": 8,
}


def send_stage(stage: str, records: list[JobRecord]) -> None:
    """Forward a bundle's surviving jobs to the next stage as one message."""
    STAGE_TASKS[stage].apply_async(
        args=[flow.dump_records(records)],
        argsrepr=f"<{stage} {bundle_label(records[0].job, len(records))}>",
        kwargsrepr="",
    )


def _guarded(payloads: str | list[dict], body: Callable[[Services], None]) -> None:
    svc = get_services()
    try:
        body(svc)
    except REDIS_ERRORS:
        raise  # declared retry
    except Exception as exc:
        log.exception("bundle failed unexpectedly; writing error rows for its jobs")
        flow.internal_error_rows(payloads, svc, exc)


def _bundle(payload: dict | list[dict] | str) -> list[dict] | str:
    """Messages from before bundles carried one job (a dict): still accepted, as a bundle of one."""
    return [payload] if isinstance(payload, dict) else payload


@app.task(name="qfarm.retrieve", **TASK_OPTIONS)
def retrieve(refs: list[dict]) -> None:
    refs = _bundle(refs)  # type: ignore[assignment]
    _guarded(refs, lambda svc: flow.handle_retrieve(refs, svc, send_stage))


@app.task(name="qfarm.generate", **TASK_OPTIONS)
def generate(records: str | list[dict]) -> None:
    records = _bundle(records)
    _guarded(records, lambda svc: flow.handle_generate(records, svc, send_stage))


@app.task(name="qfarm.verify", **TASK_OPTIONS)
def verify(records: str | list[dict]) -> None:
    records = _bundle(records)
    _guarded(records, lambda svc: flow.handle_verify(records, svc))


@app.task(name="qfarm.run_job", **TASK_OPTIONS)
def run_job(refs: list[dict]) -> None:
    for ref in _bundle(refs):  # single queries: one job a message, all stages in one task
        _guarded([ref], lambda svc, ref=ref: flow.handle_job(ref, svc))


@app.task(name="qfarm.noop", ignore_result=True)
def noop(payload: dict | None = None) -> None:
    """Bare task for the orchestration-overhead baseline (bench/perf)."""
    return None


STAGE_TASKS = {"retrieve": retrieve, "generate": generate, "verify": verify, "interactive": run_job}
