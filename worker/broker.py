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

And one change: kombu scores each delivered message, and decides which have outlived the
visibility timeout, with the host's own clock; here both use Redis's (``ServerClock``), so
a worker whose clock is off neither restores live messages nor leaves dead ones waiting.

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
from kombu.transport import virtual
from kombu.transport.redis import Mutex, MutexHeld
from kombu.utils.json import dumps

from qfarm.worker.leases import ServerClock

SCHEMES = ("redis", "rediss")

# Redis or the broker connection failing (kombu wraps a failed publish in its OperationalError).
REDIS_DOWN: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,  # includes BusyLoadingError (a restarted server loading its AOF)
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,  # a replica not yet promoted, or a server not yet writable
    OperationalError,
)


class QoS(kombu_redis.QoS):
    """kombu's acknowledgement emulation with its clock on Redis's time."""

    def append(self, message: Any, delivery_tag: str) -> None:
        delivery = message.delivery_info
        with self.pipe_or_acquire() as pipe:
            pipe.zadd(self.unacked_index_key, {delivery_tag: self.channel.server_time()}).hset(
                self.unacked_key, delivery_tag,
                dumps([message._raw, delivery["exchange"], delivery["routing_key"]]),
            ).execute()  # fmt: skip
            virtual.QoS.append(self, message, delivery_tag)

    def restore_visible(self, start: int = 0, num: int = 10, interval: int = 10) -> None:
        self._vrestore_count += 1
        if (self._vrestore_count - 1) % (interval or 1):
            return
        with self.channel.conn_or_acquire() as client:
            ceil = self.channel.server_time() - self.visibility_timeout
            try:
                with Mutex(client, self.unacked_mutex_key, self.unacked_mutex_expire):
                    visible = client.zrange(self.unacked_index_key, ceil, 0, desc=True,
                                            byscore=True, offset=num and start, num=num,
                                            withscores=True)  # fmt: skip
                    for tag, _score in visible or []:
                        self.restore_by_tag(tag, client)
            except MutexHeld:
                pass


class Channel(kombu_redis.Channel):
    QoS = QoS

    def __init__(self, connection: Any, *args: Any, **kwargs: Any) -> None:
        self._opened_on = connection.client  # the kombu Connection, before anything detaches it
        self._clock: ServerClock | None = None
        super().__init__(connection, *args, **kwargs)

    def server_time(self) -> float:
        """Now on Redis's clock (measured through this channel's client)."""
        if self._clock is None:
            # The synchronous pool (QoS's own commands use it), not ``self.client``: that
            # client's connection carries the pending BRPOP.
            self._clock = ServerClock(self._create_client)
        return self._clock.now()

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
