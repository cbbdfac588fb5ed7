"""Reporting: what a run's rows add up to, rendered without I/O.

One streaming pass over rows into counters (``runstats``) and costs (``cost``),
intervals and sketches (``stats``), the run summary (``report``), A/B comparison of two runs (``compare``)
and the phase decisions read from it (``phase``), the audit line ``qfarm ask``
prints (``audit``), and a run's headline numbers as flat metrics for run trackers
(``run_metrics``). Reading and writing files is ``producer/reports/``'s job.
The rules: docs/reports.md.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["audit", "compare", "cost", "phase", "report", "run_metrics", "runstats", "stats"]
