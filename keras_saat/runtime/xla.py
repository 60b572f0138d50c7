"""XLA settings read when TensorFlow's runtime starts: the persistent compilation cache
and the GPU compiler flags. Each returns False, setting nothing, once it is too late."""

import os
import re
import sys
from pathlib import Path


def tensorflow_started():
    """True once TensorFlow's runtime has been initialised (by any op or device query)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001


_CACHE_FLAG = "--tf_xla_persistent_cache_directory="
_ours = {}  # the TF_XLA_FLAGS value this module wrote, so a later call may replace it


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


# XLA flags set for training unless the user's XLA_FLAGS already names them: autotuning
# Triton GEMM tilings for every matmul of the unrolled step is most of XLA's compile
# time, and cuBLAS runs the step as fast (docs/performance.md, "Training throughput").
GPU_XLA_FLAGS = {"xla_gpu_enable_triton_gemm": "false"}


def set_xla_defaults():
    """Adds GPU_XLA_FLAGS to XLA_FLAGS (before TensorFlow starts; False when too late)."""
    if tensorflow_started():
        return False
    flags = os.environ.get("XLA_FLAGS", "")
    extra = [f"--{k}={v}" for k, v in GPU_XLA_FLAGS.items() if k not in flags]
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
    return True
