"""Teacher forcing unrolled against one tf.while_loop: tracing, first call, step and
memory of the bench's train part, each row in a fresh process (soft attention, batch 64).

    python -m benchmarks.unroll [SIZES] [PRECISION] > rows.jsonl

SIZES is a comma-separated list of the bench's sizes (default tutorial,paper);
PRECISION defaults to float32. Every size runs with and without XLA, in both forms.
"""

import json
import sys

from benchmarks.harness import run_in_subprocess

sizes = (sys.argv[1] if len(sys.argv) > 1 else "tutorial,paper").split(",")
precision = sys.argv[2] if len(sys.argv) > 2 else "float32"
for size in sizes:
    for xla in (True, False):
        for unroll in (True, False):
            row = run_in_subprocess("train", size, "soft", xla, 5, precision, 64, unroll)
            print(json.dumps(row), flush=True)
