"""The Python API of qfarm: the one surface the ``qfarm`` command line, the HTTP app and a
notebook use.

``qfarm sweep`` and ``qfarm ask`` are thin shells around these functions, and a notebook
calls them the same way::

    result = run_sweep(SweepSpec(questions=["What is jazz?"]), eager=True, settings=settings)
    rows = result.rows()

Eager runs execute every job in this process (an in-memory Redis; the stages run
concurrently, or one job at a time with ``serial=True``: the in-process runner both ways);
distributed runs publish the jobs to Redis for ``celery -A qfarm.worker``
workers and follow the run until every job has a row. Both write the same run
directory (``manifest.json``, ``rows.jsonl``, ``status.json``, ``summary.md``).

Everything that can be wrong with the input is checked before a run directory
exists or a message is sent, in this order: questions and modes, then Redis, the
index, the LLM endpoints and capacity.

This module is the front; the work is done in the packages beside it, grouped by what
they do: ``runs`` (start, run, follow, retry, ask, judge and cancel runs), ``farm`` (the
farm's state and health, the index, the response cache) and ``reports`` (rows, summaries,
comparisons, records and exports of a run directory). What callers may use is re-exported
here; only producer's own packages import those packages.
"""

from __future__ import annotations

from qfarm.producer.farm.cache import cache_stats, prune_cache
from qfarm.producer.farm.doctor import Health, diagnose
from qfarm.producer.farm.index import build_index, index_info
from qfarm.producer.farm.status import FarmStatus, RunProgress, farm_status
from qfarm.producer.reports.compare import (
    check_floor,
    compare_cycle,
    compare_dirs,
    comparison_json,
    cycle_json,
    regressions,
    write_comparison,
    write_cycle,
)
from qfarm.producer.reports.exports import AFTER_RUN, export_after_run
from qfarm.producer.reports.exports.mlflow import export_mlflow
from qfarm.producer.reports.exports.parquet import export_parquet
from qfarm.producer.reports.exports.traces import export_traces
from qfarm.producer.reports.record import verify_run
from qfarm.producer.reports.rows import iter_rows, parse_row, resolve_run
from qfarm.producer.runs.ask import (
    AskContext,
    AskTicket,
    answer_for,
    ask,
    ask_context,
    poll_pauses,
    submit_ask,
    wait_for_answer,
)
from qfarm.producer.runs.control import (
    CANCEL_SCOPE,
    Cancelled,
    cancel,
    cancel_run,
    describe_run,
    list_runs,
    live_cost,
    summary_data,
)
from qfarm.producer.runs.eager import resume_eager
from qfarm.producer.runs.follow import follow_run
from qfarm.producer.runs.launch import run_sweep
from qfarm.producer.runs.outcome import (
    RunOutcome,
    check_error_rate,
    judge_run,
    judge_run_dir,
    record_failure_policy,
    report_run,
)
from qfarm.producer.runs.retry import retry_errors
from qfarm.producer.runs.services import open_local_retriever
from qfarm.producer.runs.types import (
    Answer,
    Endpoints,
    EndpointsFor,
    OnProgress,
    QuestionSet,
    RunResult,
    Say,
    SweepSpec,
    configured_endpoints,
)

__all__ = [
    "AFTER_RUN",
    "CANCEL_SCOPE",
    "Answer",
    "AskContext",
    "AskTicket",
    "Cancelled",
    "Endpoints",
    "EndpointsFor",
    "FarmStatus",
    "Health",
    "OnProgress",
    "QuestionSet",
    "RunOutcome",
    "RunProgress",
    "RunResult",
    "Say",
    "SweepSpec",
    "answer_for",
    "ask",
    "ask_context",
    "build_index",
    "cache_stats",
    "cancel",
    "cancel_run",
    "check_error_rate",
    "check_floor",
    "compare_cycle",
    "compare_dirs",
    "comparison_json",
    "configured_endpoints",
    "cycle_json",
    "describe_run",
    "diagnose",
    "export_after_run",
    "export_mlflow",
    "export_parquet",
    "export_traces",
    "farm_status",
    "follow_run",
    "index_info",
    "iter_rows",
    "judge_run",
    "judge_run_dir",
    "list_runs",
    "live_cost",
    "open_local_retriever",
    "parse_row",
    "poll_pauses",
    "prune_cache",
    "record_failure_policy",
    "regressions",
    "report_run",
    "resolve_run",
    "resume_eager",
    "retry_errors",
    "run_sweep",
    "submit_ask",
    "summary_data",
    "verify_run",
    "wait_for_answer",
    "write_comparison",
    "write_cycle",
]
