"""The bench's `hostile` part: each crafted input's peak memory and time, and its answer.

The cases are `tests.support.hostile_cases`; each runs in a fresh process
(`runner.run_in_subprocess`), so its peak resident memory is its own.
"""

import tempfile
import time
from pathlib import Path

from benchmarks.harness.runner import peak_rss_mb
from tests.support.hostile_cases import hostile_cases


def measure_hostile(name):
    """Runs the case `name` here: its answer, wall time and this process's peak RSS."""
    case = {case.name: case for case in hostile_cases()}[name]
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        answer = case.run(Path(scratch))
        seconds = time.perf_counter() - start
    return {
        "case": case.name,
        "area": case.area,
        "bound": case.bound,
        "seconds": seconds,
        "answer": answer[:300],
        "answered": bool(answer),
        "peak_mb": peak_rss_mb(),
    }
