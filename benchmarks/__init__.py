"""Performance harness (see benchmarks/RESULTS.md)."""
