"""A run's status as its rows, its Redis counters and its producer say it.

``status.json`` records what the producer last knew (``running`` when it started,
``complete`` when it ended), but the record alone can lie: a run directory whose
``rows.jsonl`` was lost, emptied or cut short still says ``complete``, and an eager run
whose process was killed says ``running`` forever. Every reader (``qfarm report``,
``qfarm status``, ``summary.md``, the viewer, the API) shows ``run_state(...)`` (or, for a
run known only from its directory, ``run_status(...)``) instead of the word.
"""

from __future__ import annotations

from qfarm.common.vocab import LIVE_RUN_STATUSES, RunStatus

# Words status.json may hold that no later reading overrides.
_SETTLED = frozenset(
    {RunStatus.COMPLETE, RunStatus.INCOMPLETE, RunStatus.CANCELLED, RunStatus.FAILED}
)


def run_status(recorded: str | None, *, rows: int, n_jobs: int, eager: bool,
               producer_alive: bool | None) -> str:
    """The status to show for a run known from its directory.

    ``rows``: distinct jobs with a readable row in ``rows.jsonl``; ``producer_alive``:
    whether the process that recorded the status still runs (None: cannot tell, e.g. it
    ran on another host). Only an eager run's process runs its jobs: a distributed run
    goes on in its workers whatever happened to the producer that enqueued it.
    """
    if recorded == RunStatus.FAILED:
        return RunStatus.FAILED
    if n_jobs > 0 and rows >= n_jobs:
        return RunStatus.COMPLETE
    if recorded == RunStatus.CANCELLED:
        return RunStatus.CANCELLED
    if recorded == RunStatus.ENQUEUEING and producer_alive is False:
        # The producer died before every job was sent: nothing will send the rest.
        return RunStatus.ENQUEUE_INTERRUPTED
    if recorded in LIVE_RUN_STATUSES or recorded is None:
        if eager and producer_alive is False:
            return RunStatus.INTERRUPTED
        return recorded or RunStatus.INCOMPLETE
    if recorded == RunStatus.COMPLETE:
        # Recorded complete, but rows are missing: rows.jsonl lost, emptied, garbled or
        # cut short since.
        return RunStatus.INCOMPLETE
    return recorded


def run_state(recorded: str | None, *, done: int, total: int, cancelled: bool = False,
              error: str | None = None, from_rows: bool = False, eager: bool = False,
              producer_alive: bool | None = None) -> str:
    """One word for a run, the same for the CLI, the HTTP API and the viewer.

    ``recorded``: status.json's word (None when the run has no directory here); ``done``
    of ``total`` jobs have a row; ``cancelled`` and ``error``: the run's cancel flag and
    run-level error. ``from_rows``: the run is read from its directory alone (Redis has
    let it go), ``done`` counted in ``rows.jsonl``: then, unless cancelled or failed, the
    rows and the producer's process decide (``run_status``). Read from Redis, a run is
    failed, cancelled, complete or running, unless status.json has settled it.
    """
    if from_rows and not error and not cancelled:
        return run_status(recorded, rows=done, n_jobs=total, eager=eager,
                          producer_alive=producer_alive)
    if error:
        return RunStatus.FAILED
    if recorded in _SETTLED:
        return RunStatus(recorded)
    if cancelled:
        return RunStatus.CANCELLED
    if total and done >= total:
        return RunStatus.COMPLETE
    return recorded or RunStatus.RUNNING


def status_text(status: str, *, errored: int | None, rows: int) -> str:
    """The status as every surface shows it: a complete run with error rows reads
    ``completed with errors (N, x %)`` (N error rows, x % of its rows), never plain
    ``complete``; another status with error rows says how many. ``errored`` None: not
    counted (a run listed without reading its rows)."""
    word = str(status)
    if not errored or rows <= 0:
        return word
    if status == RunStatus.COMPLETE:
        return f"completed with errors ({errored}, {100 * errored / rows:.1f} %)"
    rows_word = "error row" if errored == 1 else "error rows"
    so_far = " so far" if status in LIVE_RUN_STATUSES else ""
    return f"{word} ({errored} {rows_word}{so_far})"
