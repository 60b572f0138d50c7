"""XLA settings: whether to compile (`resolve_jit_compile`), and those read when
TensorFlow's runtime starts: the persistent compilation cache and the GPU compiler flags
(each returns False, setting nothing, once it is too late)."""

import os
import re
import sys
from pathlib import Path

from keras_saat.errors import KerasSaatError


def resolve_jit_compile(jit_compile):
    """XLA or not for the train step: true, false, or "auto".

    "auto" means XLA when a GPU or TPU is visible. On CPUs it means plain TensorFlow,
    which steps faster there, with less memory and no compile.
    """
    if isinstance(jit_compile, str):
        import tensorflow as tf

        if jit_compile != "auto":
            raise KerasSaatError(f'jit_compile {jit_compile!r}: expected true, false or "auto"')
        return any(tf.config.list_physical_devices(kind) for kind in ("GPU", "TPU"))
    return bool(jit_compile)


def tensorflow_started():
    """True once TensorFlow's runtime has been initialised (by any op or device query)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001


_CACHE_FLAG = "--tf_xla_persistent_cache_directory="
_ours = {}  # what this module wrote to TF_XLA_FLAGS and XLA_FLAGS, so a later call may replace it


def enable_compilation_cache(directory):
    """XLA's persistent compilation cache in `directory`: a later process that compiles
    the same step function (same model, shapes and device) loads it instead.

    TensorFlow reads the setting when its runtime starts, so call this before the first
    TensorFlow op of the process. Returns the directory in use: `directory`, or the one
    the user's own TF_XLA_FLAGS names (left as it is); None (setting nothing) when it
    is too late.
    """
    if tensorflow_started():
        return None
    directory = Path(directory)
    flags = os.environ.get("TF_XLA_FLAGS", "")
    named = re.search(re.escape(_CACHE_FLAG) + r"(\S+)", flags)
    if named and flags != _ours.get("flags"):
        return Path(named.group(1))  # the user's setting wins
    if named:  # an earlier call of ours (another run in this process): replace it
        flags = (flags[: named.start()] + flags[named.end() :]).strip()
    directory.mkdir(parents=True, exist_ok=True)
    os.environ["TF_XLA_FLAGS"] = _ours["flags"] = f"{flags} {_CACHE_FLAG}{directory}".strip()
    return directory


# XLA flags set for training unless the user's XLA_FLAGS already names them, to make the
# GPU compile short: autotuning Triton GEMM tilings
# for every matmul of the unrolled step, and timing Triton against native emitters for
# each reduce and transpose fusion at its real shapes, are most of XLA's compile time, for
# a step cuBLAS and the native emitters run as fast; LLVM compiles the module's parts on
# every host core rather than one.
GPU_XLA_FLAGS = {
    "xla_gpu_enable_triton_gemm": "false",
    "xla_gpu_experimental_enable_fusion_autotuner": "false",
    "xla_gpu_enable_llvm_module_compilation_parallelism": "true",
}
# The number of LLVM compilation threads (the host's cores) and, with the workdir's XLA
# cache on, the folder where XLA keeps each fusion's autotuning result for later runs.
PARALLELISM_FLAG = "xla_gpu_force_compilation_parallelism"
AUTOTUNE_CACHE_FLAG = "xla_gpu_per_fusion_autotune_cache_dir"


def set_xla_defaults(autotune_cache=None):
    """Adds GPU_XLA_FLAGS, the compilation parallelism and, given `autotune_cache` (a
    folder), the per-fusion autotuning cache to XLA_FLAGS (before TensorFlow starts; False
    when too late). A flag the user's XLA_FLAGS names is left as it is; the flags of an
    earlier call (another run in this process) are replaced."""
    if tensorflow_started():
        return False
    flags = os.environ.get("XLA_FLAGS", "").split()
    for flag in _ours.get("xla", []):  # an earlier call's own flags, wherever they now sit
        if flag in flags:
            del flags[len(flags) - 1 - flags[::-1].index(flag)]
    named = {re.match(r"-*([^=]*)", flag).group(1) for flag in flags}  # the user's flags
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    wanted = dict(GPU_XLA_FLAGS, **{PARALLELISM_FLAG: str(max(1, min(cores or 1, 64)))})
    if autotune_cache is not None:
        Path(autotune_cache).mkdir(parents=True, exist_ok=True)
        wanted[AUTOTUNE_CACHE_FLAG] = str(autotune_cache)
    extra = [f"--{k}={v}" for k, v in wanted.items() if k not in named]
    _ours["xla"] = extra
    os.environ["XLA_FLAGS"] = " ".join([*flags, *extra])
    return True
