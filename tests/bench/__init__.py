"""Benchmarks (`make bench`): figures go to BENCHMARKS.md, never into test assertions."""
