"""Thin Celery tasks: validate the payload, call worker.flow, dispatch the next stage.

Retries are declared here for broker/row-store hiccups only; LLM retries live in
the gateway alone (one retry layer, not three). Any other exception becomes an
error row, so a failed job never leaves its sweep waiting forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from common.models import JobRecord
from worker import flow
from worker.celery_app import app
from worker.services import Services, get_services

log = logging.getLogger("qfarm.worker")

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
TASK_OPTIONS = {
    "ignore_result": True,
    "autoretry_for": REDIS_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "max_retries": 8,
}


def send_stage(stage: str, record: JobRecord) -> None:
    task = STAGE_TASKS[stage]
    task.apply_async(
        args=[record.model_dump(mode="json")],
        argsrepr=f"<{stage} {record.job.run_id}/{record.job.job_id}>",
        kwargsrepr="",
    )


def _guarded(payload: dict, body: Callable[[Services], None]) -> None:
    svc = get_services()
    try:
        body(svc)
    except REDIS_ERRORS:
        raise  # declared retry
    except Exception as exc:
        log.exception("job failed unexpectedly; writing an error row")
        flow.internal_error_row(payload, svc, exc)


@app.task(name="qfarm.retrieve", **TASK_OPTIONS)
def retrieve(ref: dict) -> None:
    _guarded(ref, lambda svc: flow.handle_retrieve(ref, svc, send_stage))


@app.task(name="qfarm.generate", **TASK_OPTIONS)
def generate(record: dict) -> None:
    _guarded(record, lambda svc: flow.handle_generate(record, svc, send_stage))


@app.task(name="qfarm.verify", **TASK_OPTIONS)
def verify(record: dict) -> None:
    _guarded(record, lambda svc: flow.handle_verify(record, svc))


@app.task(name="qfarm.run_job", **TASK_OPTIONS)
def run_job(ref: dict) -> None:
    _guarded(ref, lambda svc: flow.handle_job(ref, svc))


@app.task(name="qfarm.noop", ignore_result=True)
def noop(payload: dict | None = None) -> None:
    """Bare task for the orchestration-overhead baseline (bench/perf)."""
    return None


STAGE_TASKS = {"retrieve": retrieve, "generate": generate, "verify": verify, "interactive": run_job}
