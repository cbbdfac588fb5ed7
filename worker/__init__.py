"""Side effects of qfarm: the Celery app and tasks, retrieval backends, the LLM gateway.

``celery -A qfarm.worker worker -Q retrieve,verify`` finds the app here.
"""

if not __name__.startswith("qfarm."):  # imported by its folder's bare name from a checkout
    raise ImportError(
        f"import qfarm.{__name__}, not {__name__}: the folder installs under the qfarm name"
        " (celery -A qfarm.worker, python -m qfarm.ops.sim); a process importing both would"
        " hold two copies of every module"
    )


# Register the tasks with the app on import.
from qfarm.worker import tasks as _tasks  # noqa: E402,F401,I001
from qfarm.worker.celery_app import app

celery = app
__all__ = ["app", "celery"]
