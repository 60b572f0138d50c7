"""The GPU step, row by row under a deadline: the paper-size soft-attention train step at
batch 64, 512 and 2048, teacher forcing unrolled and in a tf.while_loop. The default step
(one XLA executable, autodiff's attention scores, the library's GPU compile flags) beside
each alternative (the fused attention scores, the split step, XLA's own flags, while
loops and conditionals in XLA's command buffers), the
persistent cache empty and filled, then a short profile and the XLA compiler's pass timers.
Each row runs in a fresh process and is appended to a JSON-lines file as it finishes.

    python -m benchmarks.gpu.step OUT_DIR [DEADLINE_S] [PRECISION]

DEADLINE_S (default 400) is when the last row's process is killed: give the device call
that many seconds and a minute more;
PRECISION defaults to bfloat16 on a GPU and float32 on a CPU (where it runs as a check
of the script, at a small size). OUT_DIR gets step.jsonl (one row each: the bench's train
part, `variant`, `process_s`), compiler.log (the pass timers of the default step) and
profile.jsonl (kernels a step and time by kind).
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import tensorflow as tf

from benchmarks.harness import run_in_subprocess

gpu = bool(tf.config.list_physical_devices("GPU"))
out_dir = Path(sys.argv[1])
deadline = float(sys.argv[2]) if len(sys.argv) > 2 else 400.0
precision = sys.argv[3] if len(sys.argv) > 3 else ("bfloat16" if gpu else "float32")
size = "paper" if gpu else "tutorial"
batches = (512, 2048, 64) if gpu else (16,)
out_dir.mkdir(parents=True, exist_ok=True)
base = os.environ.get("XLA_FLAGS", "")
# XLA's own compile defaults, named so that keras_saat.runtime.xla's GPU defaults stand
# aside (the user's flags win over them).
OLD_FLAGS = {
    "XLA_FLAGS": f"{base} --xla_gpu_enable_triton_gemm=true "
    "--xla_gpu_experimental_enable_fusion_autotuner=true "
    "--xla_gpu_enable_llvm_module_compilation_parallelism=false "
    "--xla_gpu_force_compilation_parallelism=0"
}


# XLA's default command-buffer types and its while loops and conditionals: a loop form's
# iterations (and the one executable's finite-gradient conditional) recorded as CUDA
# graph nodes instead of launched from the host.
BUFFERS = {"XLA_FLAGS": f"{base} --xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL".strip()}


def cache():
    return {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={tempfile.mkdtemp()}"}


# (name, batch, unroll, one_executable, fused, env, cap_s), in priority order: a device call
# is short, so the rows that answer the targets come first, and each row's process is
# killed at its cap (a compile that does not end is a result too).
top, big, small = batches[0], batches[1:2], batches[2:]
default_cache, fused_cache = cache(), cache()  # each step twice: the second compile reads the cache
NONE = "none (split step, XLA's own flags)"
ROWS = [
    (f"B{top} default, cache empty", top, True, "auto", False, default_cache, 150),
    (f"B{top} fused scores, cache empty", top, True, "auto", True, fused_cache, 120),
    *[(f"B{b} fused scores", b, True, "auto", True, {}, 120) for b in big],
    (f"B{top} loop, fused scores", top, False, "auto", True, {}, 120),
    (f"B{top} default, cache filled", top, True, "auto", False, default_cache, 90),
    (f"B{top} fused scores, cache filled", top, True, "auto", True, fused_cache, 90),
    *[(f"B{b} default", b, True, "auto", False, {}, 150) for b in big],
    (f"B{top} loop", top, False, "auto", False, {}, 120),
    (f"B{top} loop, loops in command buffers", top, False, "auto", False, BUFFERS, 120),
    (
        f"B{top} loop, fused scores, loops in command buffers",
        top,
        False,
        "auto",
        True,
        BUFFERS,
        120,
    ),
    (f"B{top} default, conditionals in command buffers", top, True, "auto", False, BUFFERS, 150),
    (f"B{top} split step", top, True, False, False, {}, 150),
    (f"B{top} XLA's own compile flags", top, True, "auto", False, OLD_FLAGS, 150),
    *[(f"B{b} default", b, True, "auto", False, {}, 90) for b in small],
    *[(f"B{b} {NONE}", b, True, False, False, OLD_FLAGS, 120) for b in small],
]

started = time.perf_counter()


def left():
    return deadline - (time.perf_counter() - started)


with open(out_dir / "step.jsonl", "a") as out:
    for name, batch, unroll, whole, fused, env, cap in ROWS:
        if left() < 30:
            print(f"deadline: skipped {name}", flush=True)
            continue
        start = time.perf_counter()
        args = (size, "soft", True, 5, precision, batch, unroll, whole, fused)
        try:
            row = run_in_subprocess("train", *args, env=env, timeout=min(cap, left()))
        except RuntimeError as err:
            row = {"error": str(err)[-1500:]}
        row.update(variant=name, process_s=time.perf_counter() - start)
        out.write(json.dumps(row) + "\n")
        out.flush()
        brief = {k: round(row[k], 3) for k in ("step_ms", "fraction_of_limit", "compile_s")
                 if k in row}  # fmt: skip
        print(f"{name:62s} {brief or row.get('error', '')[-300:]}", flush=True)

    # A short profile of the default step: kernels a step and time by kind.
    if left() >= 30:
        env = {"XLA_FLAGS": f"{base} --xla_enable_command_buffers_during_profiling=true"}
        try:
            row = run_in_subprocess(
                "profile", size, precision, 3, 12, top, True, True, env=env,
                timeout=min(120, left()),
            )  # fmt: skip
        except RuntimeError as err:
            row = {"error": str(err)[-1500:]}
        with open(out_dir / "profile.jsonl", "a") as profile:
            profile.write(json.dumps(row) + "\n")
        print("profile:", {k: row[k] for k in list(row)[:8]}, flush=True)

    # XLA's own pass timers for the default step's compile (its log lines, kept whole).
    if left() >= 30:
        env = {"TF_CPP_MIN_LOG_LEVEL": "0",
               "TF_CPP_VMODULE": "gpu_compiler=1,hlo_pass_pipeline=1,nvptx_compiler=1"}  # fmt: skip
        code = (
            "from keras_saat.runtime.xla import set_xla_defaults; set_xla_defaults(); "
            "from benchmarks.harness.compute import measure_train; "
            f"print(measure_train({size!r}, 'soft', True, 2, {precision!r}, {batches[0]}))"
        )
        import subprocess

        try:
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True,
                env={**os.environ, **env}, timeout=min(120, left()),
            )  # fmt: skip
            log = done.stdout + done.stderr
        except subprocess.TimeoutExpired as err:
            log = f"timed out after {err.timeout}s\n{err.stderr or ''}"
        (out_dir / "compiler.log").write_text(str(log)[-4_000_000:])
        print(f"compiler log: {len(str(log).splitlines())} lines", flush=True)

print(f"done in {time.perf_counter() - started:.0f}s", flush=True)
