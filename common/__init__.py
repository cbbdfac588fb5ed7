"""Pure domain logic of qfarm: models, policy, prompts, verification, reports.

Nothing in this package performs I/O or imports Celery, Redis, httpx or a
search client; every function is deterministic and unit-testable.
"""
