"""The follower lease: one process at a time drains a run's rows into its files.

``qfarm sweep`` and every ``--attach``/``--resume`` of the same run follow it;
only the holder of ``qfarm:run:<id>:follower`` (a token with an expiry, renewed
every poll) writes rows.jsonl and the summary. Another follower shows progress
read-only and takes over once the lease expires (its holder died or lost
Redis) or is released (its holder finished).
"""

from __future__ import annotations

import os
import secrets
import socket

import redis

from qfarm.common import keys

LEASE_TTL_S = 15.0

# Take the lease if free, or renew it if ours: 1 if held by us afterwards.
_HOLD_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class FollowerLease:
    def __init__(self, client: redis.Redis, run_id: str, ttl_s: float = LEASE_TTL_S):
        self.key = keys.follower_key(run_id)
        self.token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.ttl_ms = int(ttl_s * 1000)
        self._hold = client.register_script(_HOLD_LUA)
        self._release = client.register_script(_RELEASE_LUA)
        self.client = client

    def hold(self) -> bool:
        """Take or renew the lease; True if this process holds it now."""
        return bool(self._hold(keys=[self.key], args=[self.token, self.ttl_ms]))

    def holder(self) -> str | None:
        raw = self.client.get(self.key)
        if not raw:
            return None
        return raw.decode() if isinstance(raw, bytes) else raw

    def release(self) -> None:
        self._release(keys=[self.key], args=[self.token])
