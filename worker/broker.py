"""kombu's Redis transport with one repair: a channel can still reach Redis after its
connection was lost.

When a worker loses Redis, Celery's consumer first ``collect()``s the broken connection
(kombu closes its channels, then detaches the transport from the connection:
``transport.client = None``) and then ``close()``s it. A channel whose first close stopped
at its pending ``BRPOP`` (the read fails: Redis is down) is closed a second time, after the
detach; that close drops the channel's connection pools and rebuilds one to put back its
unacknowledged messages, from ``transport.client``: ``AttributeError: 'NoneType' object
has no attribute 'hostname'``. Celery treats that as an unrecoverable error, and the worker
stops consuming for good.

A channel only has a ``BRPOP`` pending alongside unacknowledged messages while it has free
prefetch slots, so a worker holding fewer tasks than its concurrency died on every outage
(the generate worker at the default bundle size of 32, with fewer bundles in hand than its
16 threads) and a saturated one never did (bundles of 8: all 16 threads busy, no ``BRPOP``).

Here a channel keeps the connection it was opened on and reattaches the transport to it
for that rebuild. The close then fails as kombu means it to (a connection error, which the
consumer ignores and retries), the unacknowledged messages stay in Redis's ``unacked`` hash
until a worker restores them after the visibility timeout, and the old channel's late
acknowledgements (tasks that finish after the reconnect) reach Redis through the rebuilt pool.

``register()`` makes this the transport of ``redis://`` and ``rediss://`` URLs (kombu's
aliases, so ``rediss`` keeps its TLS defaults); ``qfarm.worker.celery`` calls it.

``REDIS_DOWN`` is what every process of qfarm takes for "Redis is away for now": a task
sends its message back for redelivery, a follower waits and reconnects, the viewer shows
what the run directories hold.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu import transport as kombu_transport
from kombu.exceptions import OperationalError
from kombu.transport import redis as kombu_redis

SCHEMES = ("redis", "rediss")

# Redis or the broker connection failing (kombu wraps a failed publish in its OperationalError).
REDIS_DOWN: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,  # includes BusyLoadingError (a restarted server loading its AOF)
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,  # a replica not yet promoted, or a server not yet writable
    OperationalError,
)


class Channel(kombu_redis.Channel):
    def __init__(self, connection: Any, *args: Any, **kwargs: Any) -> None:
        self._opened_on = connection.client  # the kombu Connection, before anything detaches it
        super().__init__(connection, *args, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:  # detached by Connection.collect(): see the module
            self.connection.client = self._opened_on
        return super()._connparams(asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel


def register() -> None:
    """Use ``Transport`` for every Redis URL this process connects to (idempotent)."""
    path = f"{__name__}:Transport"
    for scheme in SCHEMES:
        kombu_transport.TRANSPORT_ALIASES[scheme] = path
        kombu_transport._transport_cache.pop(scheme, None)  # resolved before: resolve again
