"""The viewer's optional Redis: runs in progress, or submitted from another host.

The viewer must work without Redis (``qfarm view`` over a results directory),
so Redis is reached with a short timeout, a failure is remembered for a while
(pages stay fast while it is down) and reported as one line, never an error
page. ``qfarm serve`` passes the store it already has; ``qfarm view`` passes
the URL of its settings.
"""

from __future__ import annotations

import threading
import time

import redis

from qfarm.common.urls import redact_url
from qfarm.producer.store import ProducerStore

CONNECT_TIMEOUT_S = 0.5
RETRY_AFTER_S = 10.0


class RedisSource:
    """A ``ProducerStore`` when Redis answers, else None and a one-line ``note``."""

    def __init__(
        self,
        store: ProducerStore | None = None,
        url: str | None = None,
        *,
        timeout_s: float = CONNECT_TIMEOUT_S,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self._store = store
        self.url = url
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.note: str | None = None
        self._down_until = 0.0
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return self._store is not None or bool(self.url)

    def get(self) -> ProducerStore | None:
        with self._lock:
            if not self.configured or time.monotonic() < self._down_until:
                return None
            if self._store is None and self.url:
                try:
                    client = redis.Redis.from_url(
                        self.url, socket_timeout=self.timeout_s,
                        socket_connect_timeout=self.timeout_s)
                    client.ping()
                except (redis.exceptions.RedisError, ValueError, OSError) as exc:
                    self._mark_down(exc)
                    return None
                self._store = ProducerStore(client)
            return self._store

    def failed(self, exc: BaseException) -> None:
        """Record that a call on the store failed; Redis is not asked again for a while."""
        with self._lock:
            self._mark_down(exc)

    def ok(self) -> None:
        self.note = None

    def _mark_down(self, exc: BaseException) -> None:
        where = f" at {redact_url(self.url)}" if self.url else ""
        self.note = (f"Redis{where} is not reachable ({type(exc).__name__}): runs that exist "
                     "only in Redis are not listed; results on disk are.")
        self._down_until = time.monotonic() + self.retry_after_s

