"""XLA settings: whether to compile (`resolve_jit_compile`), and those read when
TensorFlow's runtime starts: the persistent compilation cache and the GPU compiler flags
(each returns False, setting nothing, once it is too late)."""

import os
import re
import sys
from pathlib import Path

from keras_saat.errors import KerasSaatError


def resolve_jit_compile(jit_compile):
    """XLA or not for the train step: true, false, or "auto" (XLA when a GPU or TPU is
    visible; plain TensorFlow steps faster on CPUs)."""
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
    """XLA's persistent compilation cache in `directory`, so a later process compiling the
    same step loads it; the directory in use (the user's TF_XLA_FLAGS wins), or None,
    setting nothing, after the first TensorFlow op."""
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


# A short GPU compile: Triton GEMM and fusion autotuning are most of XLA's compile time
# for a step cuBLAS and the native emitters run as fast; LLVM compiles on every core.
GPU_XLA_FLAGS = {
    "xla_gpu_enable_triton_gemm": "false",
    "xla_gpu_experimental_enable_fusion_autotuner": "false",
    "xla_gpu_enable_llvm_module_compilation_parallelism": "true",
}
PARALLELISM_FLAG = "xla_gpu_force_compilation_parallelism"
AUTOTUNE_CACHE_FLAG = "xla_gpu_per_fusion_autotune_cache_dir"


def set_xla_defaults(autotune_cache=None):
    """Adds GPU_XLA_FLAGS, the compilation parallelism and the per-fusion autotuning cache to
    XLA_FLAGS before TensorFlow starts (False when too late); the user's flags stay, an
    earlier call's are replaced."""
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
