"""The Celery app, configured for at-least-once delivery on Redis.

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

import socket
import sys
import threading
from typing import Any

from celery import Celery

from qfarm.common.errors import ConfigError
from qfarm.common.keys import INTERACTIVE, QUEUES, STAGES
from qfarm.common.settings import Settings, load_settings
from qfarm.worker import broker, leases

TASK_ROUTES = {stage.task: {"queue": stage.queue} for stage in STAGES}
# Probe an idle broker connection after 10 s, then every 5 s; 3 unanswered probes drop it.
KEEPALIVE = {
    opt: value
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
    if (opt := getattr(socket, name, None)) is not None
}
HEALTH_CHECK_INTERVAL_S = 10


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
        "broker_url": "memory://" if eager else settings.broker_url,
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


__all__ = ["QUEUES", "app", "configure_app"]
