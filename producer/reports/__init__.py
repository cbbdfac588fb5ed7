"""Reports on disk: what a run directory holds, read and written.

``rows`` streams ``rows.jsonl`` and finds a run by its path or id; ``summary`` writes
``summary.md`` with its plots and the run's cost; ``compare`` writes ``compare.md`` for two
runs and ``cycle.md`` for a decision cycle's four; ``record`` signs and checks a run's
record (``qfarm verify``); ``exports`` sends a finished run to Parquet, MLflow or OTLP.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["compare", "exports", "record", "rows", "summary"]
