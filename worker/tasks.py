"""Thin Celery tasks: one per link of qfarm.worker.stages.CHAIN (a bundle of jobs through
qfarm.worker.flow, then the next link's queue), and the interactive one.

A broker/row-store failure sends the bundle's message back for redelivery (jobs
that already have a row are skipped); LLM retries live in the gateway alone (one
retry layer, not three). Any other exception becomes an error row per job, so a
failed job never leaves its sweep waiting forever.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from celery import signals
from celery.exceptions import Reject

from qfarm.common.jobs import bundle_label
from qfarm.common.keys import INTERACTIVE, Stage
from qfarm.common.models import JobRecord
from qfarm.worker import flow, leases, metrics, stages
from qfarm.worker.celery_app import app
from qfarm.worker.flow import REDIS_ERRORS
from qfarm.worker.services import Services, get_services

log = logging.getLogger("qfarm.worker")

# No autoretry: Celery's retry publishes a copy of the message and acknowledges the
# original, and when that publish fails (Redis is down) it drops the message. A Redis
# error instead rejects the message with requeue: back at the head of its queue if Redis
# answers, else left in kombu's unacked hash, restored after the visibility timeout.
TASK_OPTIONS = {"ignore_result": True}

# A publish to the next stage rides out a short broker blip before the task gives up
# on it and leaves its own message for redelivery (about 6 s in all).
PUBLISH_RETRY = {"max_retries": 5, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 2.0}


def send_stage(stage: Stage, records: list[JobRecord]) -> None:
    """Forward a bundle's surviving jobs to the next stage as one message."""
    app.tasks[stage.task].apply_async(
        args=[flow.dump_records(records)],
        argsrepr=f"<{stage.name} {bundle_label(records[0].job, len(records))}>",
        kwargsrepr="",
        retry=True,
        retry_policy=PUBLISH_RETRY,
    )


def _guarded(payloads: str | list[dict], body: Callable[[Services], None]) -> None:
    svc = get_services()
    try:
        try:
            body(svc)
        except REDIS_ERRORS:
            raise
        except Exception as exc:
            # Each job's error row logs it once, with its kind (flow.write_rows).
            log.debug("bundle failed unexpectedly (%s: %s); writing error rows for its jobs",
                      type(exc).__name__, exc, exc_info=True)
            flow.internal_error_rows(payloads, svc, exc)
    except REDIS_ERRORS as exc:
        # Never acknowledge work whose rows or next stage were not stored: redeliver it
        # (jobs that got a row meanwhile are skipped).
        log.warning("Redis/broker error (%s: %s); the bundle's message goes back for redelivery",
                    type(exc).__name__, exc)
        raise Reject(exc, requeue=True) from exc


# Message formats: the first stage (and the interactive queue) takes a list of job
# refs; later stages take their bundle's records as one JSON string (flow.dump_records).


def _stage_task(stage: Stage) -> Any:
    """The Celery task of one link of the chain: its step, then the next link's queue."""

    def task(payload: str | list[dict]) -> None:
        _guarded(payload, lambda svc: flow.handle_stage(stage, payload, svc, send_stage))

    task.__name__ = task.__qualname__ = stage.name
    return app.task(name=stage.task, **TASK_OPTIONS)(task)


# One task per link of qfarm.worker.stages.CHAIN, in its order.
STAGE_TASKS = {step.stage: _stage_task(step.stage) for step in stages.CHAIN}
retrieve = STAGE_TASKS[stages.CHAIN[0].stage]  # the entry of a sweep's jobs


@app.task(name=INTERACTIVE.task, **TASK_OPTIONS)
def run_job(refs: list[dict]) -> None:
    for ref in refs:  # single queries: one job a message, all stages in one task
        _guarded([ref], functools.partial(flow.handle_job, ref))



# Operator metrics (worker/metrics.py): only real worker processes flush to Redis. The
# node name and queues are known after set-up, before the pool forks; the main process
# starts a flusher when ready (it heartbeats for the node, and with the threads pool it
# also runs the tasks); each prefork child starts its own after its fork.
_node: dict[str, object] = {}


_logging_done: list[bool] = []


@signals.celeryd_init.connect
def _logging_at_init(options: dict | None = None, **_: object) -> None:
    # Sent just before Celery's privilege check warns: that warning goes through it too.
    _setup_logging((options or {}).get("loglevel"))


@signals.setup_logging.connect
def _setup_logging(loglevel: object = None, **_: object) -> None:
    """The worker's logging, configured once (qfarm.common.logs): connecting this signal keeps
    Celery from installing handlers of its own, so its lines and ours go through one
    handler, each once. QFARM_LOG_LEVEL wins over celery's --loglevel."""
    import sys

    from qfarm.common import logs
    from qfarm.common.errors import ConfigError
    from qfarm.common.settings import load_settings

    if _logging_done:
        return
    try:
        settings = load_settings()
    except ConfigError:
        return  # the app's configuration reports the bad variable and exits (celery_app)
    level = settings.log_level or (logging.getLevelName(loglevel) if isinstance(loglevel, int)
                                   else str(loglevel or "warning"))
    logs.set_role("worker")
    logs.install(logs.log_handler(sys.stderr, fmt=settings.log_format,
                                  secrets=settings.secrets()), level.lower())
    _logging_done.append(True)


@signals.celeryd_after_setup.connect
def _note_node(sender: object = None, instance: object = None, **_: object) -> None:
    from qfarm.common import logs
    from qfarm.common.metrics import role_of
    from qfarm.common.settings import load_settings

    queues = app.amqp.queues.consume_from or app.amqp.queues
    _node.update(hostname=str(sender or "worker"), queues=sorted(queues))
    logs.set_role(f"worker:{role_of(queues)}")
    if load_settings().log_format == "json" and instance is not None:
        # Celery prints its banner to stdout before the first line: with JSON lines
        # wanted, every line must be one object.
        instance.quiet = True  # type: ignore[attr-defined]


@signals.worker_ready.connect
def _start_metrics(**_: object) -> None:
    _start_flushing()
    _start_leases()


# The main process holds the messages (whatever the pool): it renews their leases.
_leases: list[leases.MessageLeases] = []


def _start_leases() -> None:
    settings = get_services().settings
    vt = settings.visibility_timeout_s
    lease = leases.MessageLeases(get_services().store.client, leases.held_delivery_tags,
                                 interval_s=leases.renew_interval_s(vt))  # fmt: skip
    _leases.append(lease)
    lease.start()


@signals.worker_process_init.connect
def _start_child_metrics(**_: object) -> None:
    _start_flushing()


def _start_flushing() -> None:
    if _node:
        metrics.start_flushing(get_services().settings, node=str(_node["hostname"]),
                               queues=_node["queues"])  # type: ignore[arg-type]


@signals.worker_shutdown.connect
def _stop_metrics(**_: object) -> None:
    metrics.stop_flushing()
    while _leases:
        _leases.pop().stop()
