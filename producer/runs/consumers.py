"""Which queues have a worker consuming them, and the command that starts one.

``qfarm ask``, a following sweep and ``qfarm doctor`` ask the same question: the
workers' heartbeats (``worker/metrics.py``) answer it in one Redis round trip, and
Celery's inspect (a broadcast that waits its whole timeout) is asked only for the
queues no heartbeat names, so a worker whose heartbeat is off
(``QFARM_METRICS_FLUSH_S=0``) still counts.
"""

from __future__ import annotations

import threading
import time
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


# Followers in one process (the HTTP API follows every sweep posted to it) ask the same
# question at once: with ``reuse_s`` one of them asks the farm and the others take its
# answer. Thirty followers each broadcasting an inspect every few seconds queued on the
# app's broker connections and took minutes to notice a cancel.
SHARED_ANSWER_S = 2.0
_answers: dict[tuple[str, tuple[str, ...]], tuple[float, dict[str, list[str]]]] = {}
_asking = threading.Lock()


def consumers_by_queue(app: Any, store: ProducerStore | None, queues: Sequence[str], *,
                       inspect_timeout_s: float = INSPECT_TIMEOUT_S,
                       reuse_s: float = 0.0) -> dict[str, list[str]]:
    """For each of ``queues``, the names of the workers that consume it (an empty list:
    none). Heartbeats first; Celery's inspect only when some queue has none. With
    ``reuse_s``, an answer this process got less than that long ago is reused."""
    if reuse_s <= 0:
        return _ask_farm(app, store, queues, inspect_timeout_s)
    key = (str(app.conf.broker_url), tuple(queues))  # one app object, reconfigured by tests
    with _asking:
        at, answer = _answers.get(key, (-reuse_s, {}))
        if time.monotonic() - at >= reuse_s:
            answer = _ask_farm(app, store, queues, inspect_timeout_s)
            _answers[key] = (time.monotonic(), answer)
        return {q: list(names) for q, names in answer.items()}


def _ask_farm(app: Any, store: ProducerStore | None, queues: Sequence[str],
              inspect_timeout_s: float) -> dict[str, list[str]]:
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
                      inspect_timeout_s: float = INSPECT_TIMEOUT_S,
                      reuse_s: float = 0.0) -> list[str]:
    """Those of ``queues`` no worker consumes, in the order given."""
    found = consumers_by_queue(app, store, queues, inspect_timeout_s=inspect_timeout_s,
                               reuse_s=reuse_s)
    return [q for q in queues if not found[q]]
