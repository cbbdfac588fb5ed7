"""A run's status as its rows and its producer say it.

``status.json`` records what the producer last knew (``running`` when it started,
``complete`` when it ended), but the record alone can lie: a run directory whose
``rows.jsonl`` was lost, emptied or cut short still says ``complete``, and an eager run
whose process was killed says ``running`` forever. Every reader (``qfarm report``,
``summary.md``, the viewer, the API) shows ``run_status(...)`` instead of the word.
"""

from __future__ import annotations

# Words the producer writes and this module may answer. A distributed run's producer
# also writes "enqueueing", "enqueue interrupted" and "detached: Redis unreachable".
COMPLETE = "complete"
INCOMPLETE = "incomplete"
RUNNING = "running"
INTERRUPTED = "interrupted"
CANCELLED = "cancelled"
FAILED = "failed"
ENQUEUEING = "enqueueing"
ENQUEUE_INTERRUPTED = "enqueue interrupted"

# Statuses that say a producer is still at work (its process may have died since).
IN_PROGRESS = (RUNNING, ENQUEUEING)


def run_status(recorded: str | None, *, rows: int, n_jobs: int, eager: bool,
               producer_alive: bool | None) -> str:
    """The status to show for a run.

    ``rows``: distinct jobs with a readable row in ``rows.jsonl``; ``producer_alive``:
    whether the process that recorded the status still runs (None: cannot tell, e.g. it
    ran on another host). Only an eager run's process runs its jobs: a distributed run
    goes on in its workers whatever happened to the producer that enqueued it.
    """
    if recorded == FAILED:
        return FAILED
    if n_jobs > 0 and rows >= n_jobs:
        return COMPLETE
    if recorded == CANCELLED:
        return CANCELLED
    if recorded == ENQUEUEING and producer_alive is False:
        # The producer died before every job was sent: nothing will send the rest.
        return ENQUEUE_INTERRUPTED
    if recorded in IN_PROGRESS or recorded is None:
        if eager and producer_alive is False:
            return INTERRUPTED
        return recorded or INCOMPLETE
    if recorded == COMPLETE:
        # Recorded complete, but rows are missing: rows.jsonl lost, emptied, garbled or
        # cut short since.
        return INCOMPLETE
    return recorded
