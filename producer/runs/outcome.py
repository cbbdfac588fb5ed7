"""A run judged against a failure policy: the exit code a CI job gates on, and why.

A run is a success only when every job has a row and no more of its rows errored than
``max_error_rate`` allows (0 by default: one errored row fails it). ``qfarm sweep`` and
``qfarm report`` both judge through here, so a run re-checked after ``--detach`` gets the
code its sweep would have had.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.settings import Settings
from qfarm.common.vocab import ExitCode, RunStatus
from qfarm.producer.runs.types import RunResult

# How a run that did not end complete maps to a code: the operator stopped it, or it is
# not (yet) whole.
_STOPPED = frozenset({RunStatus.INTERRUPTED, RunStatus.ENQUEUE_INTERRUPTED})


def check_error_rate(rate: float) -> float:
    """``--max-error-rate`` as given: a fraction of rows from 0 to 1."""
    if not math.isfinite(rate) or not 0.0 <= rate <= 1.0:
        raise InputError(f"--max-error-rate {rate}: a fraction of rows from 0 to 1, e.g. "
                         "--max-error-rate 0.05 to tolerate 5% errored rows")
    return rate


@dataclass(frozen=True)
class RunOutcome:
    """A run's end, judged: ``exit_code`` and, when it is not OK, ``reason`` (one line)."""

    manifest: Manifest
    run_dir: Path
    status: str
    exit_code: ExitCode
    rows: int
    errored_rows: int | None  # None: not counted (a run stopped by Ctrl-C exits at once)
    max_error_rate: float
    reason: str = ""
    error: str | None = None
    summary: Path | None = None

    @property
    def error_rate(self) -> float | None:
        if self.errored_rows is None or not self.rows:
            return None
        return self.errored_rows / self.rows

    def as_json(self) -> dict[str, Any]:
        """The machine-readable record of ``qfarm sweep --json`` and ``qfarm report --json``."""
        m = self.manifest
        return {
            "run_id": m.run_id,
            "status": str(self.status),
            "exit_code": int(self.exit_code),
            "outcome": self.exit_code.name.lower(),
            "reason": self.reason or None,
            "rows": self.rows,
            "n_jobs": m.n_jobs,
            "errored_rows": self.errored_rows,
            "error_rate": self.error_rate,
            "max_error_rate": self.max_error_rate,
            "error": self.error,
            "simulated": m.simulated,
            "eager": m.eager,
            "n_questions": m.n_questions,
            "selection": m.selection.model_dump(mode="json") if m.selection else None,
            "run_dir": str(self.run_dir),
            "rows_path": str(self.run_dir / "rows.jsonl"),
            "summary": str(self.summary) if self.summary else None,
        }


def judge_run(result: RunResult, max_error_rate: float = 0.0, *,
              detached: bool = False) -> RunOutcome:
    """Judge a run as ``run_sweep``/``follow_run``/``resume_eager`` returned it. ``detached``:
    the caller asked to return once the jobs were enqueued, so a running run is a success."""
    status = result.status
    rows, errored = result.rows_written, None
    if status not in _STOPPED:  # reading every row would hold up a Ctrl-C
        rows, errored = count_rows(result.rows_path)
        rows = max(rows, result.rows_written)
    if status == RunStatus.RUNNING and detached:
        code, reason = ExitCode.OK, ""
    else:
        code, reason = _judge(result.manifest, str(status), rows, errored or 0, max_error_rate)
    return RunOutcome(result.manifest, result.run_dir, status, code, rows, errored,
                      max_error_rate, reason, result.error, result.summary)


def record_failure_policy(run_dir: Path, max_error_rate: float) -> None:
    """Write the ``--max-error-rate`` a sweep was judged by into its ``status.json``, so
    ``qfarm report`` judges the run by it again (it exits as the sweep did)."""
    from qfarm.producer.rundir import read_status, write_status

    if (run_dir / "manifest.json").exists():
        write_status(run_dir, read_status(run_dir).judged_by(check_error_rate(max_error_rate)))


def judge_run_dir(run_dir: Path, max_error_rate: float | None = None, *,
                  live: dict[str, Any] | None = None) -> RunOutcome:
    """Judge a run from its directory (``qfarm report``): its status as the summary
    shows it (``qfarm.common.runstatus``), and its rows. ``max_error_rate`` None: the rate
    the run's sweep was judged by (``record_failure_policy``), else 0. ``live``: what Redis
    holds of the run (``control.redis_state``), whose state and counts then decide: after
    ``--detach`` or a cancel the directory lags behind Redis."""
    from qfarm.producer.reports.rows import read_run
    from qfarm.producer.reports.summary import shown_status  # matplotlib is slow to import
    from qfarm.producer.rundir import read_status

    manifest, stats = read_run(run_dir)
    recorded = read_status(run_dir)
    if max_error_rate is None:  # the rate the run's sweep was judged by, else 0
        max_error_rate = recorded.max_error_rate or 0.0
    # Jobs with a row, not lines: a deleted row and a duplicated one keep the line count.
    status = shown_status(manifest, recorded, stats.jobs)
    jobs, errored = stats.jobs, stats.error_rows
    if live is not None:
        prog = live["progress"]
        status, jobs = str(live["state"]), int(prog["done"])
        errored = int(prog["failed"] or 0)
    # An interrupted run read back is a run not complete (1); 130 says *this* process was.
    code, reason = _judge(manifest, status, jobs, errored, max_error_rate,
                          stopped=ExitCode.FAILED)
    if stats.duplicates:
        note = (f"rows.jsonl holds {stats.duplicates} rows for jobs that already have one: it "
                "is not the file the farm wrote; `qfarm verify` checks it against the run's record")
        if code in (ExitCode.OK, ExitCode.ROW_ERRORS):
            code, reason = ExitCode.FAILED, f"run {manifest.run_id}: {note}"
        else:
            reason = f"{reason}; {note}"
    summary = run_dir / "summary.md"
    return RunOutcome(manifest, run_dir, status, code,
                      jobs if live is not None else stats.rows, errored, max_error_rate,
                      reason, recorded.error or None,
                      summary if summary.exists() else None)


def count_rows(rows_path: Path) -> tuple[int, int]:
    """(rows, errored rows) of a rows file, read as the summary reads it: a row with an
    error, or with no verdict, is an errored row."""
    from qfarm.producer.reports.rows import read_stats  # matplotlib is slow to import

    stats = read_stats(rows_path)
    return stats.rows, sum(stats.errors.values())


def _judge(manifest: Manifest, status: str, rows: int, errored: int, max_error_rate: float, *,
           stopped: ExitCode = ExitCode.INTERRUPTED) -> tuple[ExitCode, str]:
    run_id, total = manifest.run_id, manifest.n_jobs
    if status in _STOPPED:
        return stopped, f"run {run_id} is {status}: {rows} of {total} jobs have a row"
    if status != RunStatus.COMPLETE:
        return ExitCode.FAILED, f"run {run_id} is {status}: {rows} of {total} jobs have a row"
    if errored and errored > max_error_rate * rows:
        return ExitCode.ROW_ERRORS, (
            f"run {run_id} completed with errors: {errored} of {rows} rows errored "
            f"({100 * errored / rows:.1f}%, more than --max-error-rate {max_error_rate:g} "
            "allows); the summary's 'Errors and retries' section says what failed"
        )
    return ExitCode.OK, ""


def report_run(run_dir: Path, settings: Settings, max_error_rate: float | None = None) -> RunOutcome:
    """``qfarm report``: write the run's summary and judge it. A distributed run that Redis
    still holds is read there (``control.redis_state``): after ``--detach`` or a cancel its
    directory lags behind Redis, whose state and counts of rows then stand."""
    from qfarm.producer.reports.summary import write_summary  # matplotlib is slow to import
    from qfarm.producer.rundir import read_manifest, read_status
    from qfarm.producer.runs.control import redis_state

    manifest, live = read_manifest(run_dir), None
    if not manifest.eager:
        live = redis_state(manifest.run_id, settings.model_copy(
            update={"results_dir": run_dir.parent}))
    if live is None:
        write_summary(run_dir)
    else:
        write_summary(run_dir, status=read_status(run_dir).seen_in_redis(
            live["state"], rows=live["progress"]["done"]))
    return judge_run_dir(run_dir, max_error_rate, live=live)
