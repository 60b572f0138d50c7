"""Why the XLA compile is slow, and what cuts it: the paper-size train step (soft
attention, batch 64) compiled in fresh processes, teacher forcing unrolled and in one
tf.while_loop, each once with an empty and once with a filled persistent compilation
cache (a second run), and on a GPU under XLA flag sets.

    python -m benchmarks.gpu.compile OUT.jsonl [PRECISION]

PRECISION defaults to bfloat16 on a GPU and float32 on a CPU. Each row holds the
bench's train part (trace_s: Python tracing; compile_s: the rest of the first call)
first_step_s (the measurement's start, TensorFlow's import included, to the end of the
first step) and process_s, the whole process. It runs on a CPU too (the Triton rows only on a GPU).
"""

import json
import os
import sys
import tempfile
import time

import tensorflow as tf

from benchmarks.harness import run_in_subprocess

gpu = bool(tf.config.list_physical_devices("GPU"))
precision = sys.argv[2] if len(sys.argv) > 2 else ("bfloat16" if gpu else "float32")
base = os.environ.get("XLA_FLAGS", "")


def cached(directory):
    return {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={directory}"}


VARIANTS = []  # (name, unroll, env)
for unroll, form in ((False, "loop"), (True, "unrolled")):
    cache = tempfile.mkdtemp()
    VARIANTS += [
        (f"{form}, cache empty", unroll, cached(cache)),
        (f"{form}, cache filled (a second run)", unroll, cached(cache)),
    ]
if gpu:  # XLA's own GPU defaults: keras-saat turns Triton GEMMs off unless XLA_FLAGS names them
    triton = f"{base} --xla_gpu_enable_triton_gemm=true"
    VARIANTS += [
        ("unrolled, Triton GEMMs on", True, {"XLA_FLAGS": triton}),
        ("unrolled, --xla_gpu_autotune_level=0", True,
         {"XLA_FLAGS": f"{triton} --xla_gpu_autotune_level=0"}),
    ]  # fmt: skip

with open(sys.argv[1], "a") as out:
    for name, unroll, env in VARIANTS:
        start = time.perf_counter()
        row = run_in_subprocess("train", "paper", "soft", True, 5, precision, 64, unroll, env=env)
        row.update(variant=name, process_s=time.perf_counter() - start)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(
            f"{name:40s} trace {row['trace_s']:5.1f}s  compile {row['compile_s']:6.1f}s  "
            f"first step {row['first_step_s']:6.1f}s  step {row['step_ms']:7.1f} ms  "
            f"process {row['process_s']:6.1f}s",
            flush=True,
        )
