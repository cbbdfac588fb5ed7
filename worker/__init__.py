"""Side effects of qfarm: the Celery app and tasks, retrieval backends, the LLM gateway.

``celery -A qfarm.worker worker -Q retrieve,verify`` finds the app here.
"""

# Register the tasks with the app on import.
from qfarm.worker import tasks as _tasks  # noqa: E402,F401,I001
from qfarm.worker.celery_app import app

celery = app
__all__ = ["app", "celery"]
