"""The ``qfarm`` command line: sits on top of common/, worker/, producer/, ops/ and bench/."""
