"""Side effects of qfarm: the Celery app and tasks, retrieval backends, the LLM gateway.

``celery -A worker worker -Q retrieve,verify`` finds the app here.
"""

# Register the tasks with the app on import.
from worker import tasks as _tasks  # noqa: E402,F401,I001
from worker.celery_app import app

celery = app
__all__ = ["app", "celery"]
