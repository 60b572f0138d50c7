"""Why the XLA compile is slow on a GPU, and what cuts it: the paper-size train step
(soft attention, batch 64, bfloat16) compiled in fresh processes under XLA flag sets,
and a second process reading TensorFlow's persistent compilation cache.

    python benchmarks/gpu/compile.py OUT.jsonl
"""

import json
import os
import sys
import tempfile
import time

from keras_saat.bench import _run_in_subprocess

base = os.environ.get("XLA_FLAGS", "")
cache = tempfile.mkdtemp()
# XLA's own defaults (keras-saat now turns Triton GEMMs off unless XLA_FLAGS names them).
cached = {
    "TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={cache}",
    "XLA_FLAGS": f"{base} --xla_gpu_enable_triton_gemm=true",
}
VARIANTS = [
    ("default, cache empty", {**cached}),
    ("default, cache filled (a second run)", {**cached}),
    (
        "--xla_gpu_autotune_level=0",
        {"XLA_FLAGS": f"{base} --xla_gpu_enable_triton_gemm=true --xla_gpu_autotune_level=0"},
    ),
    (
        "--xla_gpu_enable_triton_gemm=false",
        {"XLA_FLAGS": f"{base} --xla_gpu_enable_triton_gemm=false"},
    ),
]
with open(sys.argv[1], "a") as out:
    for name, env in VARIANTS:
        start = time.perf_counter()
        row = _run_in_subprocess("train", "paper", "soft", True, 5, "bfloat16", 64, env=env)
        row.update(variant=name, process_s=time.perf_counter() - start)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(
            f"{name:40s} compile {row['compile_s']:6.1f}s  step {row['step_ms']:6.2f} ms  "
            f"process {row['process_s']:6.1f}s",
            flush=True,
        )
