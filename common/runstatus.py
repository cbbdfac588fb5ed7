"""A run's status: what ``status.json`` records, how it changes, and the word every reader shows.

``StatusRecord`` is ``status.json`` as a model, and its methods are the only ways a run's
record changes (``started``, ``jobs_sent``, ``resumed``, ``no_worker``, ``failed``,
``finished``, ``interrupted``, ``cancel_recorded``…): each says what happened and refuses a change the
run's state forbids (a complete run does not go back to running; an interrupted one can
be resumed). ``qfarm.producer.rundir`` reads and writes the file; nothing else opens it.

The record says what the producer last knew (``running`` when it started, ``complete``
when it ended), but the record alone can lie: a run directory whose ``rows.jsonl`` was
lost, emptied or cut short still says ``complete``, and an eager run whose process was
killed says ``running`` forever. Every reader (``qfarm report``, ``qfarm status``,
``summary.md``, the viewer, the API) shows ``run_state(...)`` (or, for a run known only
from its directory, ``run_status(...)``) instead of the word, and ``status_text`` says it
in words, error rows named (``completed with errors (N, x %)``). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from qfarm.common.errors import RunStateError
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


class ProducerProcess(NamedTuple):
    """The process running a run, recorded so a reader can tell when it is gone."""

    pid: int
    host: str


class RetryEntry(BaseModel):
    """One ``--retry-errors`` of the run, as ``status.json``'s ``retries`` lists them."""

    model_config = ConfigDict(frozen=True)

    started_at: float
    finished_at: float
    jobs: int
    replaced: int
    error_rows_after: int


class RowsRecovered(BaseModel):
    """Where rows came back from after Redis lost them (``--resume``, a healing follower)."""

    model_config = ConfigDict(frozen=True)

    rows_recovered_from_file: int | None = None
    rows_recovered_from_redis: int | None = None
    rows_restored_to_redis: int | None = None

    def has_any(self) -> bool:
        return any(v is not None and v > 0 for v in (
            self.rows_recovered_from_file, self.rows_recovered_from_redis,
            self.rows_restored_to_redis))


class StatusRecord(BaseModel):
    """``status.json``: what the producer last knew of its run (docs/reports.md, 'Run status').

    Every field is optional: a run directory holds what its run got as far as writing.
    ``source`` and ``rows_in_redis`` are never written: a reader sets them
    (``seen_in_redis``) for a run Redis holds, whose state and count of rows are Redis's.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    status: RunStatus | None = None
    started_at: float | None = None
    pid: int | None = None
    host: str | None = None
    enqueued: int | None = None
    resumed_at: float | None = None
    resumed_jobs: int | None = None
    # The time the run stood still between interrupts and their resumes, summed: its wall
    # time leaves it out (``time_paused``).
    paused_s: float | None = Field(default=None, ge=0.0)
    # The run's queues no worker consumed when its follower stopped (``no_worker``).
    unconsumed_queues: tuple[str, ...] = ()
    finished_at: float | None = None
    rows: int | None = None
    error: str | None = None
    # The run's error rows when it ended, and the status in words (``status_text``).
    errored_rows: int | None = None
    error_rate: float | None = None
    status_text: str | None = None
    # The --max-error-rate its sweep was judged by: ``qfarm report`` judges by it again.
    max_error_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    cancelled_at: float | None = None  # the first cancel
    last_cancelled_at: float | None = None
    cancels: int | None = None
    purged_messages: int | None = None
    cancelled_jobs: int | None = None
    retrying: int | None = None  # jobs of a retry under way
    retry_started_at: float | None = None
    retries: tuple[RetryEntry, ...] = ()
    rows_recovered_from_file: int | None = None
    rows_recovered_from_redis: int | None = None
    rows_restored_to_redis: int | None = None
    source: Literal["disk", "redis"] = Field(default="disk", exclude=True)
    rows_in_redis: int | None = Field(default=None, exclude=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools(cls, value: Any) -> Any:
        # JSON true is no count, time or rate (pydantic would read it as 1).
        if isinstance(value, bool):
            raise ValueError("a boolean where a number or word belongs")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("not a finite number")
        return value

    # ------------------------------------------------------------------ reading, writing

    @classmethod
    def from_json(cls, data: Any) -> StatusRecord:
        """The record from ``status.json``'s parsed JSON. A field that does not read (a
        word no qfarm writes, a string where a count belongs) is left out, not the whole
        record: a reader shows what the rest says."""
        if not isinstance(data, Mapping):
            return cls()
        fields = {k: v for k, v in data.items() if k in cls.model_fields
                  and k not in ("source", "rows_in_redis")}
        for _ in range(len(fields) + 1):
            try:
                return cls.model_validate(fields)
            except ValidationError as exc:
                bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
                if not bad & fields.keys():
                    return cls()
                fields = {k: v for k, v in fields.items() if k not in bad}
        return cls()

    def as_json(self) -> dict[str, Any]:
        """What ``status.json`` holds: the fields this run has, as JSON."""
        out = self.model_dump(mode="json", exclude_none=True)
        for name in ("retries", "unconsumed_queues"):
            if not getattr(self, name):
                out.pop(name, None)
        return out

    def _with(self, **fields: Any) -> StatusRecord:
        return type(self).model_validate({**self.model_dump(), **fields})

    # ------------------------------------------------------------------ questions

    def recovered(self) -> RowsRecovered:
        return RowsRecovered(rows_recovered_from_file=self.rows_recovered_from_file,
                             rows_recovered_from_redis=self.rows_recovered_from_redis,
                             rows_restored_to_redis=self.rows_restored_to_redis)

    def time_paused(self) -> float:
        """Seconds the run stood still between interrupts and their resumes (``paused_s``),
        which its wall time and throughput leave out; 0 when it never paused."""
        return self.paused_s or 0.0

    def pause_before(self, at: float, *, last_row_at: float | None) -> float:
        """How long the run stood still before a resume at ``at``: since its last activity,
        its recorded end or its newest row (``last_row_at``), whichever is later; 0 when it
        left no trace of when it stopped."""
        ends = [t for t in (self.finished_at, last_row_at) if t is not None]
        return max(0.0, at - max(ends)) if ends else 0.0

    def is_live(self, producer_alive: bool | None) -> bool:
        """Whether its producer still works at it: recorded running or enqueueing, by a
        process that still runs (``producer_alive`` False: it is gone; None: cannot tell,
        taken as alive)."""
        return self.status in LIVE_RUN_STATUSES and producer_alive is not False

    def check_ended(self, run_id: str, producer_alive: bool | None, *, then: str) -> None:
        """RunStateError when a live producer still runs the run (``then``: what to do
        once it has ended)."""
        if self.status in LIVE_RUN_STATUSES and producer_alive:
            raise RunStateError(f"run {run_id} is still running (process {self.pid}); {then}")

    # ------------------------------------------------------------------ transitions

    def started(self, at: float, process: ProducerProcess, *, enqueueing: bool) -> StatusRecord:
        """A new run's producer began: ``enqueueing`` (a distributed run sends its jobs
        first) or ``running`` (an eager run runs them)."""
        if self.status is not None:
            raise RunStateError(f"a run that is {self.status} cannot start again; "
                                "start a new run, or resume this one")
        state = RunStatus.ENQUEUEING if enqueueing else RunStatus.RUNNING
        return self._with(status=state, started_at=at, pid=process.pid, host=process.host)

    def jobs_sent(self, sent: int) -> StatusRecord:
        """Every job was sent: the run is running on the workers."""
        self._require(RunStatus.ENQUEUEING, "finish enqueueing")
        return self._with(status=RunStatus.RUNNING, enqueued=sent)

    def enqueue_interrupted(self) -> StatusRecord:
        """The producer was stopped before every job was sent."""
        self._require(RunStatus.ENQUEUEING, "stop enqueueing")
        return self._with(status=RunStatus.ENQUEUE_INTERRUPTED)

    def resumed(self, at: float, process: ProducerProcess, *, jobs: int,
                producer_alive: bool | None, run_id: str,
                last_row_at: float | None = None) -> StatusRecord:
        """This process runs the ``jobs`` the run has no row for. An interrupted,
        incomplete or killed run can be resumed; a complete one only when rows went
        missing since (``jobs`` > 0), and a live one not at all. The time the run stood
        still (``pause_before``; ``last_row_at``: its newest row's end) is added to
        ``paused_s``."""
        self.check_ended(run_id, producer_alive, then="stop it first or wait for it to end")
        if self.status == RunStatus.COMPLETE and jobs == 0:
            raise RunStateError(f"run {run_id} is complete: every job has a row, nothing to "
                                "resume")
        return self._with(status=RunStatus.RUNNING, resumed_at=at, resumed_jobs=jobs,
                          pid=process.pid, host=process.host,
                          **self._paused_until(at, last_row_at))

    def resend_started(self, at: float, *, last_row_at: float | None) -> StatusRecord:
        """A distributed ``--resume`` is about to send again the jobs without a row: the
        time the run stood still (``pause_before``) is added to ``paused_s``. The state
        stays: the workers run the run, and its follower records how the run ends."""
        return self._with(**self._paused_until(at, last_row_at))

    def _paused_until(self, at: float, last_row_at: float | None) -> dict[str, Any]:
        if self.finished_at is None and last_row_at is None:
            return {}
        pause = self.pause_before(at, last_row_at=last_row_at)
        return {"paused_s": round(self.time_paused() + pause, 3)}

    def detached(self) -> StatusRecord:
        """The follower lost Redis: the run goes on in its workers, unwatched."""
        return self._with(status=RunStatus.DETACHED)

    def no_worker(self, queues: Sequence[str], *, rows: int) -> StatusRecord:
        """The follower stopped: no worker consumed ``queues`` for as long as it waits, with
        ``rows`` rows drained. The jobs stay queued: a worker started later runs them, and
        ``--attach`` drains their rows."""
        return self._with(status=RunStatus.NO_WORKER, unconsumed_queues=tuple(queues),
                          rows=rows)

    def failed(self, error: str, *, rows: int,
               recovered: RowsRecovered | None = None) -> StatusRecord:
        """A run-level error (its manifest unreadable by the workers) ended it."""
        return self._with(status=RunStatus.FAILED, error=error, rows=rows,
                          **_recovered(recovered))

    def interrupted(self, *, rows: int, error: str) -> StatusRecord:
        """The producer had to stop (a full disk) with ``rows`` rows kept; resumable."""
        return self._with(status=RunStatus.INTERRUPTED, rows=rows, error=error)

    def finished(self, at: float, *, rows: int, n_jobs: int, cancelled: bool = False,
                 interrupted: bool = False, recovered: RowsRecovered | None = None,
                 cancelled_jobs: int | None = None,
                 retry: RetryEntry | None = None) -> StatusRecord:
        """The producer is done with the run: ``complete`` when each of its ``n_jobs``
        jobs has a row (``rows`` counts distinct job ids), else ``cancelled``,
        ``interrupted`` (Ctrl-C: resumable) or ``incomplete``. ``retry``: the
        ``--retry-errors`` that ended, added to ``retries``."""
        state = (RunStatus.COMPLETE if rows >= n_jobs else RunStatus.CANCELLED if cancelled
                 else RunStatus.INTERRUPTED if interrupted else RunStatus.INCOMPLETE)
        more: dict[str, Any] = _recovered(recovered)
        if cancelled_jobs is not None:
            more["cancelled_jobs"] = cancelled_jobs
        if retry is not None:
            more.update(retries=(*self.retries, retry), retrying=None)
        return self._with(status=state, finished_at=at, rows=rows, **more)

    def rows_counted(self, shown: str, *, errored: int, rows: int) -> StatusRecord:
        """The run's error rows as its summary counted them: how many, their share, and
        the status in words (``completed with errors (N, x %)``)."""
        return self._with(errored_rows=errored,
                          error_rate=round(errored / rows, 6) if rows else None,
                          status_text=status_text(shown, errored=errored, rows=rows))

    def judged_by(self, max_error_rate: float) -> StatusRecord:
        """The ``--max-error-rate`` the run's sweep was judged by."""
        return self._with(max_error_rate=max_error_rate)

    def cancel_recorded(self, at: float, *, cancels: int, purged_messages: int,
                        cancelled_jobs: int) -> StatusRecord:
        """``qfarm cancel`` flagged the run (counts cumulative; the first cancel's time
        kept). The state stays: the follower records ``cancelled`` when the run ends."""
        return self._with(cancelled_at=self.cancelled_at if self.cancelled_at is not None
                          else at, last_cancelled_at=at, cancels=cancels,
                          purged_messages=purged_messages, cancelled_jobs=cancelled_jobs)

    def retry_started(self, at: float, *, jobs: int) -> StatusRecord:
        """A ``--retry-errors`` of ``jobs`` error rows began (the run's state stays; the
        caller checked that no live producer runs it: ``check_ended``)."""
        return self._with(retrying=jobs, retry_started_at=at)

    def seen_in_redis(self, state: str, *, rows: int) -> StatusRecord:
        """The record as a reader shows a run Redis holds: Redis's state and rows."""
        return self.model_copy(update={"status": RunStatus(state), "source": "redis",
                                       "rows_in_redis": rows})

    def shown_as(self, state: str) -> StatusRecord:
        """The record with the state a reader shows (``run_status``) in place of the word."""
        return self.model_copy(update={"status": RunStatus(state)})

    def _require(self, state: RunStatus, what: str) -> None:
        if self.status != state:
            raise RunStateError(f"a run that is {self.status or 'not started'} cannot "
                                f"{what}; only a run that is {state} can")


def _recovered(recovered: RowsRecovered | None) -> dict[str, Any]:
    return recovered.model_dump(exclude_none=True) if recovered is not None else {}
