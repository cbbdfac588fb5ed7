"""The farm around the runs: its state (``status``: Redis, workers, queues and the runs it
holds), its health checked end to end (``doctor``), the search index (``index``) and the
response cache (``cache``)."""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["cache", "doctor", "index", "status"]
