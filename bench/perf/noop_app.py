"""qfarm's Celery app plus a bare task, for the orchestration benchmark's baseline.

``celery -A bench.perf.noop_app worker`` runs the product's tasks and this one; the
product itself has no task that does nothing.
"""

from __future__ import annotations

from qfarm.worker.celery import app

NOOP_TASK = "qfarm.noop"


@app.task(name=NOOP_TASK, ignore_result=True)
def noop(payload: dict | None = None) -> None:
    """What a task costs with no work in it: the baseline of orchestration_ratio."""
    return None


celery = app
__all__ = ["NOOP_TASK", "app", "celery", "noop"]
