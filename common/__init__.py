"""Pure domain logic of qfarm: the contracts at the top, one subpackage per concern.

At the top, what every process agrees on: the vocabulary (``vocab``), the error tree
(``errors``), records that cross processes (``models``, ``jobs``), the run's policy
and model profiles (``policy``, ``profiles``), settings, Redis keys, metric names,
question files, version stamps, URL and text hygiene, a run's status, the back-off of a
retry (its jitter from a random source the caller may pass). Below it, by
what the farm does: ``grounding/`` (from a question's quantifier to a verified row),
``retrieval/`` (passages, query bodies and ranking, retrieval figures) and
``reporting/`` (run statistics, summaries, comparisons). Top-level modules import no
subpackage; subpackages import the top.

Nothing in this package performs I/O or imports Celery, Redis, httpx or a
search client; every function is deterministic and unit-testable.
"""

if not __name__.startswith("qfarm."):  # imported by its folder's bare name from a checkout
    raise ImportError(
        f"import qfarm.{__name__}, not {__name__}: the folder installs under the qfarm name"
        " (celery -A qfarm.worker, python -m qfarm.ops.sim); a process importing both would"
        " hold two copies of every module"
    )


# The public submodules (tests/test_public_surface.py pins them). The contracts and the three
# concerns; redis_urls is settings' own.
__all__ = [
    "backoff",
    "cache",
    "errors",
    "grounding",
    "jobs",
    "keys",
    "logs",
    "metrics",
    "models",
    "policy",
    "profiles",
    "questions",
    "record",
    "reporting",
    "retrieval",
    "runstatus",
    "settings",
    "text",
    "traces",
    "urls",
    "versions",
    "vocab",
]
