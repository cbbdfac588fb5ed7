"""Message leases: a live worker keeps renewing the messages it holds, so the visibility
timeout is how long a *silent* worker's messages wait, not how long a bundle may run.

kombu's Redis transport keeps each message a worker has taken in the ``unacked`` hash,
scored in the ``unacked_index`` sorted set by when it was delivered; any live worker
puts back into its queue every message whose score is older than the visibility
timeout (``restore_visible``, every ``unacked_restore_interval``). On its own that
timeout has to exceed the longest bundle plus its wait inside the worker, or long
bundles run twice; so it was an hour, and the bundles of a host that dropped off the
network (or was lost) waited that hour.

Here each worker's main process (the one that holds the messages, whatever the pool)
runs a thread that every ``renew_interval_s(visibility_timeout)`` seconds sets the score
of each message it holds (reserved or running) to now, but only while kombu still has
the message (``ZADD XX`` after ``HEXISTS``: a message already restored is not brought
back to life). A worker that stops renewing, because it died, its host was cut off or
lost, or its Redis link hangs, lets its messages age past the timeout, and another
worker restores them within ``redelivery_bound_s``. When a cut-off host comes back, its
late results are harmless: rows are written set-if-absent, and its late acknowledgement
of a message another worker has since taken only drops that message from ``unacked``
(should that other worker then die too, the follower re-sends the jobs that have
neither a row nor a message).

Every score and every restore decision is on Redis's clock (``TIME``), not the host's:
a worker whose clock ran two minutes ahead saw every live bundle as two minutes old and
restored it at each scan, so each was run again by another worker (104 model calls for
40 jobs). ``ServerClock`` is the host's clock corrected by its measured offset from the
server's; kombu's delivery scores and restore scans use it too (``qfarm.worker.broker``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import redis

from qfarm.common.keys import UNACKED_INDEX_KEY, UNACKED_KEY

log = logging.getLogger("qfarm.worker.leases")


# How often a process measures its clock against Redis's. Clocks drift by seconds a day
# at most; a jump (an NTP step, a suspended VM) is corrected within this.
CLOCK_CHECK_S = 30.0


class ServerClock:
    """Redis's time (``TIME``) as this process reads it: the local clock plus an offset
    measured every ``CLOCK_CHECK_S`` (half the round trip taken as the server's delay)."""

    def __init__(self, client: redis.Redis | Callable[[], redis.Redis],
                 check_s: float = CLOCK_CHECK_S):  # fmt: skip
        # A client, or how to make one per measurement: kombu's channel measures through its
        # pool, never through the connection its BRPOP is pending on (a TIME reply read as
        # the BRPOP's would be a message from a queue named after the time).
        self._client = client
        self.check_s = check_s
        self._offset = 0.0
        self._checked = -float("inf")
        self._lock = threading.Lock()

    def now(self) -> float:
        if time.monotonic() - self._checked >= self.check_s:
            self._measure()
        return time.time() + self._offset

    @property
    def offset_s(self) -> float:
        """Redis's clock minus this host's, as last measured."""
        return self._offset

    def _measure(self) -> None:
        with self._lock:
            if time.monotonic() - self._checked < self.check_s:
                return
            client = self._client if isinstance(self._client, redis.Redis) else self._client()
            before = time.time()
            seconds, micros = client.time()
            after = time.time()
            self._offset = seconds + micros / 1e6 - (before + after) / 2
            self._checked = time.monotonic()
            if abs(self._offset) > 5:
                log.warning("this host's clock is %.1f s %s Redis's: leases use Redis's",
                            abs(self._offset), "behind" if self._offset > 0 else "ahead of")


# Renew the score of each held message that kombu still has; returns how many.
_RENEW_LUA = """
local n = 0
for i = 1, #ARGV - 1 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[2], 'XX', ARGV[#ARGV], ARGV[i])
    n = n + 1
  end
end
return n
"""


def renew_interval_s(visibility_timeout_s: float) -> float:
    """A quarter of the timeout, at most 10 s: three renewals can be lost (a stalled
    link, a busy host) before a live worker's messages are taken for abandoned."""
    return max(0.5, min(10.0, visibility_timeout_s / 4))


def restore_interval_s(visibility_timeout_s: int) -> int:
    """kombu's ``unacked_restore_interval`` (scans for expired messages), in seconds."""
    return max(1, min(10, visibility_timeout_s // 2))


# kombu's scans for expired messages take a lock in Redis (``unacked_mutex``) that expires
# after 300 s by default: a worker cut off or reset between taking and releasing it stopped
# every worker's scans for five minutes. A scan is short, and two at once are harmless
# (each restore is a WATCHed transaction: a message goes back once).
RESTORE_MUTEX_EXPIRE_S = 10


def redelivery_bound_s(visibility_timeout_s: int) -> float:
    """The longest a silent worker's messages wait before they are back in their queue:
    the timeout since its last renewal, one scan interval of a live worker, and, if the
    silent worker went away holding the scans' lock, that lock's expiry."""
    return (visibility_timeout_s + renew_interval_s(visibility_timeout_s)
            + restore_interval_s(visibility_timeout_s) + RESTORE_MUTEX_EXPIRE_S)  # fmt: skip


class MessageLeases:
    """Renews the ``unacked_index`` score of the delivery tags ``held()`` returns."""

    def __init__(self, client: redis.Redis, held: Callable[[], Iterable[str]], interval_s: float,
                 clock: Callable[[], float] | None = None):  # fmt: skip
        self.client = client
        self.held = held
        self.interval_s = interval_s
        self.clock = clock or ServerClock(client).now
        self._renew = client.register_script(_RENEW_LUA)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="qfarm-message-leases", daemon=True)
        self._failing = False

    def renew(self) -> int:
        """Renew once; returns how many held messages were renewed."""
        tags = sorted(set(self.held()))
        if not tags:
            return 0
        # On Redis's clock, as kombu's delivery scores are here (qfarm.worker.broker).
        return int(self._renew(keys=[UNACKED_KEY, UNACKED_INDEX_KEY], args=[*tags, repr(self.clock())]))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.renew()
                if self._failing:
                    log.info("message leases renewed again")
                self._failing = False
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any one failure
                if not self._failing:  # one line per outage, not one per interval
                    log.warning("cannot renew message leases (%s: %s); retrying every %.0f s",
                                type(exc).__name__, exc, self.interval_s)
                self._failing = True

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)


__all__ = ["RESTORE_MUTEX_EXPIRE_S", "MessageLeases", "ServerClock", "redelivery_bound_s", "renew_interval_s", "restore_interval_s"]
