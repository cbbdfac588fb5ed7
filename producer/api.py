"""The Python API of qfarm: run a sweep, follow one again, or ask a single question.

``qfarm sweep`` and ``qfarm ask`` are thin shells around these functions, and a
notebook calls them the same way::

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

This module is the front: the work is done by private modules beside it (``_launch``
starts a sweep, ``_eager`` and ``_distributed`` run it, ``_follow`` follows one, ``_ask``
asks one question, ``_index`` builds the index, ``_status`` reads the farm's state,
``_cache`` the result cache's and prunes it, ``_outcome`` judges how a run ended against a failure policy: its exit code), and
what callers may use is re-exported here.
"""

from __future__ import annotations

from qfarm.producer._ask import (
    AskContext,
    AskTicket,
    answer_for,
    ask,
    ask_context,
    poll_pauses,
    submit_ask,
    wait_for_answer,
)
from qfarm.producer._cache import cache_stats, prune_cache
from qfarm.producer._eager import resume_eager
from qfarm.producer._follow import follow_run
from qfarm.producer._index import build_index, index_info
from qfarm.producer._launch import run_sweep
from qfarm.producer._outcome import (
    RunOutcome,
    check_error_rate,
    judge_run,
    judge_run_dir,
    record_failure_policy,
    report_run,
)
from qfarm.producer._services import open_local_retriever
from qfarm.producer._status import FarmStatus, RunProgress, farm_status
from qfarm.producer._types import (
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
from qfarm.producer.retry import retry_errors

__all__ = [
    "Answer",
    "AskContext",
    "AskTicket",
    "Endpoints",
    "EndpointsFor",
    "FarmStatus",
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
    "check_error_rate",
    "configured_endpoints",
    "farm_status",
    "follow_run",
    "index_info",
    "judge_run",
    "judge_run_dir",
    "open_local_retriever",
    "poll_pauses",
    "prune_cache",
    "record_failure_policy",
    "report_run",
    "resume_eager",
    "retry_errors",
    "run_sweep",
    "submit_ask",
    "wait_for_answer",
]
