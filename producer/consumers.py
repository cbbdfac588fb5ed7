"""Which queues have a worker consuming them, and the command that starts one.

``qfarm ask``, a following sweep and ``qfarm doctor`` ask the same question: the
workers' heartbeats (``worker/metrics.py``) answer it in one Redis round trip, and
Celery's inspect (a broadcast that waits its whole timeout) is asked only for the
queues no heartbeat names, so a worker whose heartbeat is off
(``QFARM_METRICS_FLUSH_S=0``) still counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from qfarm.common import keys
from qfarm.common.vocab import Role
from qfarm.producer.store import ProducerStore

INSPECT_TIMEOUT_S = 1.0

# The README's worker commands ('Run a farm'), one per role, with the queues each consumes.
_ROLE_QUEUES: tuple[tuple[Role, tuple[str, ...], str], ...] = (
    (Role.CPU, (keys.RETRIEVE.queue, keys.VERIFY.queue), '-P prefork -c "$(nproc)"'),
    (Role.GPU, (keys.GENERATE.queue,), "-P threads -c 16"),
    (Role.INTERACTIVE, (keys.INTERACTIVE.queue,), "-P threads -c 8"),
)


def worker_command(role: Role) -> str:
    """The command that starts a worker of ``role`` (as the README and the Procfile say)."""
    for name, queues, pool in _ROLE_QUEUES:
        if name == role:
            return (f"celery -A qfarm.worker worker -Q {','.join(queues)} {pool} "
                    f"-n {role.value}@%h --without-gossip --without-mingle")
    raise ValueError(f"{role}: not a worker role")


def worker_commands(queues: Iterable[str]) -> list[str]:
    """The commands of the roles that consume ``queues``, one per role, in the README's order."""
    wanted = set(queues)
    return [worker_command(role) for role, served, _ in _ROLE_QUEUES if wanted & set(served)]


def consumers_by_queue(app: Any, store: ProducerStore | None, queues: Sequence[str], *,
                       inspect_timeout_s: float = INSPECT_TIMEOUT_S) -> dict[str, list[str]]:
    """For each of ``queues``, the names of the workers that consume it (an empty list:
    none). Heartbeats first; Celery's inspect only when some queue has none."""
    found: dict[str, list[str]] = {q: [] for q in queues}
    if store is not None:
        for worker in store.live_workers():
            for q in worker.queues:
                if q in found:
                    found[q].append(worker.name)
    if all(found.values()):
        return found
    replies = app.control.inspect(timeout=inspect_timeout_s).active_queues() or {}
    for name, consumed in replies.items():
        for q in consumed:
            qname = q.get("name")
            if qname in found and name not in found[qname]:
                found[qname].append(name)
    return found


def unconsumed_queues(app: Any, store: ProducerStore | None, queues: Sequence[str], *,
                      inspect_timeout_s: float = INSPECT_TIMEOUT_S) -> list[str]:
    """Those of ``queues`` no worker consumes, in the order given."""
    found = consumers_by_queue(app, store, queues, inspect_timeout_s=inspect_timeout_s)
    return [q for q in queues if not found[q]]
