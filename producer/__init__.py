"""Producer side of qfarm: plans, submits and follows runs. ``qfarm.producer.api`` is the
Python API (``run_sweep``, ``follow_run``, ``ask``), re-exported here."""

if not __name__.startswith("qfarm."):  # imported by its folder's bare name from a checkout
    raise ImportError(
        f"import qfarm.{__name__}, not {__name__}: the folder installs under the qfarm name"
        " (celery -A qfarm.worker, python -m qfarm.ops.sim); a process importing both would"
        " hold two copies of every module"
    )


from qfarm.producer.api import (
    Answer,
    Endpoints,
    QuestionSet,
    RunResult,
    SweepSpec,
    ask,
    configured_endpoints,
    follow_run,
    retry_errors,
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
    "retry_errors",
    "run_sweep",
]
