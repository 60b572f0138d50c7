"""Performance harness (see docs/performance.md)."""
