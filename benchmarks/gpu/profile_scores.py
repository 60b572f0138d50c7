"""The train step's kernels with Eq. 4's scores fused and with autodiff's, teacher forcing
unrolled and in the loop: a profile of each (`python -m benchmarks`' profile part, command
buffers kept on under the profiler), one fresh process each, appended to a JSON-lines
file.

    python -m benchmarks.gpu.profile_scores OUT.jsonl [SIZE] [BATCH] [CAP_S]

SIZE defaults to paper on a GPU (bfloat16) and tutorial on a CPU (float32, a check of the
script); BATCH to 512 on a GPU and 16 on a CPU; CAP_S (default 150) kills a row's process.
Each row has wall_ms, kernels (launches a step), kinds_ms and the 40 largest kernels.
"""

import json
import os
import sys

from benchmarks.harness import run_in_subprocess
from benchmarks.harness.runner import on_gpu

gpu = on_gpu()
out = sys.argv[1]
size = sys.argv[2] if len(sys.argv) > 2 else ("paper" if gpu else "tutorial")
batch = int(sys.argv[3]) if len(sys.argv) > 3 else (512 if gpu else 16)
cap = float(sys.argv[4]) if len(sys.argv) > 4 else 150.0
precision = "bfloat16" if gpu else "float32"
flags = os.environ.get("XLA_FLAGS", "")
env = {"XLA_FLAGS": f"{flags} --xla_enable_command_buffers_during_profiling=true"}
# The fused steps compile in a quarter of the time, and the unrolled form is the default:
# unrolled first, fused first.
for unroll, fused in ((True, True), (True, False), (False, True), (False, False)):
    try:
        row = run_in_subprocess(
            "profile", size, precision, 3, 40, batch, True, unroll, fused, env=env, timeout=cap
        )
    except RuntimeError as err:
        row = {"error": str(err)[-2000:], "fused_scores": fused}
    row["unroll"] = unroll
    with open(out, "a") as rows:
        rows.write(json.dumps(row) + "\n")
    print(unroll, fused, {k: row[k] for k in list(row)[:11]}, flush=True)
