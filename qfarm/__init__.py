"""The ``qfarm`` command line: sits on top of common/, worker/, producer/ and ops/;
the shipped question sets are its package data (``question_sets.py``)."""

# The public submodules (tests/test_public_surface.py pins them). The command modules are the
# CLI's own; ``qfarm.cli:main`` is the console entry.
__all__ = ["cli"]
