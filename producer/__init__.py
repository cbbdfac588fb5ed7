"""Producer side of qfarm: plans, submits and follows runs. ``qfarm.producer.api`` is the
Python API (``run_sweep``, ``follow_run``, ``ask``), re-exported here."""

from qfarm.producer.api import (
    Answer,
    Endpoints,
    QuestionSet,
    RunResult,
    SweepSpec,
    ask,
    configured_endpoints,
    follow_run,
    run_sweep,
)

__all__ = [
    "Answer",
    "Endpoints",
    "QuestionSet",
    "RunResult",
    "SweepSpec",
    "ask",
    "configured_endpoints",
    "follow_run",
    "run_sweep",
]
