"""Benchmarks: printed as tables, never asserted (run with ``python -m tests.bench.<name>``)."""
