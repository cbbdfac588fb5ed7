"""The ``qfarm`` command line: sits on top of common/, worker/, producer/ and ops/;
the shipped question sets are its package data (``question_sets.py``)."""
