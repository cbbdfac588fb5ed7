"""Refuse a sweep too big for the farm before its first message is sent.

Two limits, checked in this order once the plan is known:

* ``QFARM_MAX_JOBS_PER_RUN``: a plan of more jobs is refused outright (a typo such
  as ``-n 1000000000`` must not start filling Redis).
* Redis memory: the plan's pending messages must fit in what Redis has left. With
  ``maxmemory`` set, that is ``maxmemory - used_memory``. With ``maxmemory`` 0 (no
  limit; Redis grows until the host runs out) it is half of ``total_system_memory -
  used_memory``, since the host is shared with workers and the OS. A server that
  reports neither (some managed services hide them) is not checked.

Rows written back (about as large again per job, kept ``ROW_TTL_S``) are not in the
estimate: they arrive as the run drains its queues, not all at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.settings import Settings

if TYPE_CHECKING:  # the CLI imports this module for every command; redis only when used
    import redis

# Redis bytes a pending job costs, measured with `python -m bench.perf.enqueue --jobs 20000`
# (Redis 7, kombu JSON messages): 1,373 bytes a job at one job a message and 387 at bundles
# of 8, i.e. about 1,127 bytes per message plus 246 per job it carries.
MESSAGE_BYTES = 1127
JOB_BYTES = 246
HOST_MEMORY_SHARE = 0.5


def estimated_queue_bytes(n_jobs: int, bundle_size: int) -> int:
    """Redis memory held by ``n_jobs`` pending jobs sent in bundles of ``bundle_size``."""
    messages = -(-n_jobs // max(bundle_size, 1))
    return messages * MESSAGE_BYTES + n_jobs * JOB_BYTES


def free_redis_bytes(memory: dict[str, Any]) -> tuple[int, str] | None:
    """Bytes a plan may use according to ``INFO memory``, and how that was decided."""
    used = int(memory.get("used_memory", 0))
    maxmemory = int(memory.get("maxmemory", 0))
    if maxmemory > 0:
        return maxmemory - used, f"maxmemory {_mb(maxmemory)}, used {_mb(used)}"
    host = int(memory.get("total_system_memory", 0))
    if host > 0:
        free = int((host - used) * HOST_MEMORY_SHARE)
        return free, f"no maxmemory: half of the host's {_mb(host)} less {_mb(used)} used"
    return None


def check_job_count(manifest: Manifest, settings: Settings) -> None:
    if manifest.n_jobs > settings.max_jobs_per_run:
        raise InputError(
            f"this sweep is {manifest.n_jobs:,} jobs ({manifest.n_questions:,} questions x "
            f"{len(manifest.modes)} modes x -n {manifest.n:,}), above QFARM_MAX_JOBS_PER_RUN="
            f"{settings.max_jobs_per_run:,}; lower -n or split the question file "
            "(or raise QFARM_MAX_JOBS_PER_RUN)"
        )


def check_redis_memory(manifest: Manifest, settings: Settings, client: redis.Redis) -> None:
    free = free_redis_bytes(client.info("memory"))
    if free is None:
        return
    free_bytes, how = free
    need = estimated_queue_bytes(manifest.n_jobs, settings.bundle_size)
    if need > free_bytes:
        raise InputError(
            f"this sweep's {manifest.n_jobs:,} pending jobs need about {_mb(need)} in Redis and "
            f"only {_mb(max(free_bytes, 0))} is free ({how}); lower -n, split the question file, "
            "or give Redis more memory (maxmemory)"
        )


def check_plan_fits(
    manifest: Manifest, settings: Settings, client: redis.Redis | None = None
) -> None:
    """Raise InputError if the plan is over the job limit or does not fit in Redis."""
    check_job_count(manifest, settings)
    if client is not None:
        check_redis_memory(manifest, settings, client)


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"
