"""Performance benchmarks: each prints its figures, ratios against a baseline measured in
the same run, with its headline figure as the last line. Run as `python -m bench.perf.NAME`."""
