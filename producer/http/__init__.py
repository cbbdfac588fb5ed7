"""``qfarm serve``: the farm's HTTP front door (FastAPI on uvicorn); docs/api.md.

``app.create_app(settings)`` builds the ASGI app: the /v1 API over the run API
(``qfarm.producer.api``, ``qfarm.producer.runs.control``), Prometheus /metrics over the counters
workers flush to Redis, /healthz, and the viewer (``qfarm.producer.viewer``) at ``/``.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["app", "auth"]
