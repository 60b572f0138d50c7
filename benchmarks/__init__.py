"""The performance harness (`python -m benchmarks`, `benchmarks.harness`) and one script
a topic beside it (`python -m benchmarks.NAME`); their results are indexed in RESULTS.md."""
