"""Question sets, run results, reports and performance benchmarks of qfarm."""
