"""The Celery app and its tasks: the one module of qfarm that imports Celery.

``celery -A qfarm.worker`` finds it (Celery looks for ``qfarm.worker.celery`` when the
package has no ``app``), and the producer reaches it only when a run sends messages, so
every other module of qfarm imports without Celery.

The tasks are thin: one per link of qfarm.worker.stages.CHAIN (a bundle of jobs through
qfarm.worker.flow, then the next link's queue), and the interactive one. A broker/row-store
failure sends the bundle's message back for redelivery (jobs that already have a row are
skipped); LLM retries live in the gateway alone (one retry layer, not three). Any other
exception becomes an error row per job, so a failed job never leaves its sweep waiting
forever.

The app is configured for at-least-once delivery on Redis.

Configuration is read from QFARM_* settings when Celery first needs it
(``on_configure``), never at import time. Decisions, each checked against
Celery's and kombu's docs (see docs/distributed.md):

* JSON only (``accept_content=['json']``): pickle from a shared broker is
  remote code execution; a pickled message is refused by the worker.
* ``task_acks_late`` + ``task_reject_on_worker_lost``: a job whose process dies
  is redelivered instead of being acknowledged and lost.
* ``worker_prefetch_multiplier=1``: the visibility clock starts when a message
  reaches the worker, so long prefetch buffers would cause duplicate runs.
* ``visibility_timeout`` set identically in broker and result-backend transport
  options; it must exceed the longest queue wait inside a worker plus a run.
* ``socket_timeout``: kombu's default waits forever on a dead connection.
* Across a network that fails: TCP keepalive on every broker socket (an idle
  connection to a vanished peer is dropped in about 25 s, not the kernel's two
  hours) and kombu's ``health_check_interval`` of 10 s (its consumer drops a BRPOP
  whose reply is overdue: a half-open socket is left within about 21 s).
* ``visibility_timeout`` is a lease: each worker renews the messages it holds
  (worker/leases.py), so a worker that went silent (dead, cut off, lost) has its
  bundles redelivered within ``leases.redelivery_bound_s`` of its last renewal.
* Results ignored: rows are written to Redis by job id (set-if-absent); no
  chords or groups, which would collect every result into one key.
* Redis URLs go through ``qfarm.worker.broker.Transport``: kombu's Redis transport,
  repaired so that a worker survives the loss of Redis (see that module).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, signals
from celery.exceptions import Reject
from celery.worker import state as worker_state

from qfarm.common import logs
from qfarm.common.errors import ConfigError
from qfarm.common.jobs import bundle_label
from qfarm.common.keys import INTERACTIVE, QUEUES, STAGES, Stage
from qfarm.common.metrics import role_of
from qfarm.common.models import JobRecord
from qfarm.common.settings import Settings, load_settings
from qfarm.common.urls import redact_url
from qfarm.worker import broker, encoding, flow, leases, metrics, stages, tracing
from qfarm.worker.broker import REDIS_DOWN
from qfarm.worker.runner import throughput_mode
from qfarm.worker.services import Services, get_services

log = logging.getLogger("qfarm.worker")

TASK_ROUTES = {stage.task: {"queue": stage.queue} for stage in STAGES}
# Probe an idle broker connection after 10 s, then every 5 s; 3 unanswered probes drop it.
KEEPALIVE = {
    opt: value
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
    if (opt := getattr(socket, name, None)) is not None
}
HEALTH_CHECK_INTERVAL_S = 10


EAGER_BROKER_URL = "memory://localhost/"


def celery_config(settings: Settings, *, eager: bool = False) -> dict[str, Any]:
    transport = {
        "visibility_timeout": settings.visibility_timeout_s,
        "socket_timeout": settings.broker_socket_timeout_s,
        "socket_connect_timeout": settings.broker_socket_timeout_s,
        "socket_keepalive": True,
        "socket_keepalive_options": KEEPALIVE,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        # Scan for abandoned unacked messages every interval (no throttling), so a
        # silent worker's jobs come back soon after their visibility timeout.
        "unacked_restore_interval": leases.restore_interval_s(settings.visibility_timeout_s),
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": leases.RESTORE_MUTEX_EXPIRE_S,
    }
    return {
        # The in-memory transport ignores the host, but kombu warns "No hostname was
        # supplied" on a URL without one, at every eager run.
        "broker_url": EAGER_BROKER_URL if eager else settings.broker_url,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": transport,
        "result_backend_transport_options": dict(transport),
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": settings.broker_socket_timeout_s,
        "task_routes": TASK_ROUTES,
        "task_default_queue": INTERACTIVE.queue,
        "task_create_missing_queues": True,
        "worker_send_task_events": settings.task_events,
        "task_send_sent_event": settings.task_events,
        "worker_hijack_root_logger": False,
        "task_always_eager": eager,
        "task_eager_propagates": eager,
        "task_store_eager_result": False,
    }


class QfarmCelery(Celery):
    def on_configure(self) -> None:  # called lazily by Celery on first config access
        if not getattr(self, "_qfarm_configured", False):
            try:
                settings = load_settings()
            except ConfigError as exc:
                # A worker (`celery -A qfarm.worker worker`) reads its settings here, at start-up:
                # a bad QFARM_* value is one line and exit 2, not Celery's traceback.
                print(f"qfarm worker: error: {exc}", file=sys.stderr, flush=True)
                raise SystemExit(exc.exit_code) from None
            self.conf.update(celery_config(settings))
            self._qfarm_configured = True


# Before any connection: every Redis connection of this process uses the repaired transport.
broker.register()
app = QfarmCelery("qfarm", set_as_current=True)


# The HTTP API configures the app for every sweep it starts, from concurrent threads:
# dropping the pools while another thread builds its producer pool left Celery's lazily
# created pool None under it (a 500 in one of 30 simultaneous sweeps). So the app is
# reconfigured, and its pools dropped, only when the configuration changes, under a lock.
_configure_lock = threading.Lock()
_applied: dict[str, Any] | None = None


def configure_app(settings: Settings, *, eager: bool = False) -> Celery:
    """Configure explicitly (eager runs, producers with their own settings)."""
    global _applied
    config = celery_config(settings, eager=eager)
    with _configure_lock:
        app._qfarm_configured = True  # type: ignore[attr-defined]
        if config == _applied:
            return app
        app.conf.update(config)
        # Connections already pooled still point at the previous broker (a process that
        # reconfigures: tests, benchmarks); drop them as Celery does after a fork.
        app._after_fork()  # type: ignore[attr-defined]
        _applied = config
    return app


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
        args=[encoding.dump_records(records)],
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
        except REDIS_DOWN:
            raise
        except Exception as exc:
            # Each job's error row logs it once, with its kind (flow.write_rows).
            log.debug("bundle failed unexpectedly (%s: %s); writing error rows for its jobs",
                      type(exc).__name__, exc, exc_info=True)
            flow.internal_error_rows(payloads, svc, exc)
    except REDIS_DOWN as exc:
        # Never acknowledge work whose rows or next stage were not stored: redeliver it
        # (jobs that got a row meanwhile are skipped).
        log.warning("Redis/broker error (%s: %s); the bundle's message goes back for redelivery",
                    type(exc).__name__, exc)
        raise Reject(exc, requeue=True) from exc


# Message formats: the first stage (and the interactive queue) takes a list of job
# refs; later stages take their bundle's records as one JSON string (encoding.dump_records).


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
    _refuse_wrong_credentials()
    _tune_interpreter()


# A worker process does nothing but run stages: it keeps the in-process runner's
# interpreter settings (a rarer cyclic collector, a coarser switch interval; worker/runner.py,
# throughput_mode) for its whole life, and its forked children inherit them.
_tuned: list[contextlib.AbstractContextManager[None]] = []


def _tune_interpreter() -> None:
    if not _tuned:
        mode = throughput_mode()
        mode.__enter__()
        _tuned.append(mode)


def _refuse_wrong_credentials() -> None:
    """Exit at once when Redis refuses the worker's credentials: Celery would retry the
    broker connection a hundred times while a supervisor showed the worker RUNNING, and no
    retry can fix a password. Redis being down is left to Celery's retries (it comes back)."""
    import redis

    settings = load_settings()
    try:
        redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=5).ping()
    except (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError,
            redis.exceptions.NoPermissionError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    except redis.exceptions.ResponseError as exc:
        if "WRONGPASS" not in str(exc) and "NOAUTH" not in str(exc):
            return
        why = str(exc)
    except redis.exceptions.RedisError:
        return
    else:
        return
    log.critical(
        "Redis at %s refused this worker's credentials (%s): fix the password in "
        "QFARM_REDIS_URL; exiting", redact_url(settings.redis_url), why)
    logging.shutdown()
    os._exit(ConfigError.exit_code)


@signals.setup_logging.connect
def _setup_logging(loglevel: object = None, **_: object) -> None:
    """The worker's logging, configured once (qfarm.common.logs): connecting this signal keeps
    Celery from installing handlers of its own, so its lines and ours go through one
    handler, each once. QFARM_LOG_LEVEL wins over celery's --loglevel."""
    if _logging_done:
        return
    try:
        settings = load_settings()
    except ConfigError:
        return  # the app's configuration reports the bad variable and exits (on_configure)
    level = settings.log_level or (logging.getLevelName(loglevel) if isinstance(loglevel, int)
                                   else str(loglevel or "warning"))
    logs.set_role("worker")
    logs.install(logs.log_handler(sys.stderr, fmt=settings.log_format,
                                  secrets=settings.secrets()), level.lower())
    _logging_done.append(True)


@signals.celeryd_after_setup.connect
def _note_node(sender: object = None, instance: object = None, **_: object) -> None:
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
    lease = leases.MessageLeases(get_services().store.client, held_delivery_tags,
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
    tracing.shutdown()  # the spans still batched (worker/tracing.py)


@signals.worker_process_shutdown.connect
def _stop_child_tracing(**_: object) -> None:
    tracing.shutdown()  # a prefork child leaves without running exit handlers


def held_delivery_tags() -> list[str]:
    """Delivery tags of the messages this worker process has taken and not yet
    acknowledged: Celery's reserved requests (prefetched or waiting for a slot) and
    active ones."""
    for _ in range(5):
        try:  # the consumer adds requests from another thread: a copy can meet a change
            requests = [*list(worker_state.reserved_requests), *list(worker_state.active_requests)]
            break
        except RuntimeError:
            continue
    else:
        return []
    tags: list[str] = []
    for request in requests:
        message = getattr(request, "message", None)
        tag = getattr(message, "delivery_tag", None)
        if tag:
            tags.append(str(tag))
    return tags


__all__ = ["QUEUES", "STAGE_TASKS", "app", "configure_app", "held_delivery_tags", "retrieve", "run_job", "send_stage"]
