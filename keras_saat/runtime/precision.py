"""Numeric precision: mixed-precision policies and TF32.

`train.mixed_precision` is "none" (float32), "bfloat16" (mixed_bfloat16), "float16"
(mixed_float16, with loss scaling) or "auto": bfloat16 on CPUs with AVX512_BF16 or AMX
and on GPUs of compute capability >= 8.0, float16 on older GPUs, none otherwise. The
softmaxes, losses, baseline and beam scores stay in float32 and variables are float32,
so a model trained in bfloat16 loads anywhere. TF32 (TensorFlow's default on Ampere and
later GPUs, about 1e-3 relative error) stays on for training; `set_tf32(False)` gives
bitwise-reproducible float32.
"""

import contextlib
from pathlib import Path

from keras_saat.errors import KerasSaatError

PRECISIONS = ("none", "bfloat16", "float16", "auto")

# The Keras dtype policy of each resolved precision.
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def _cpu_flags():
    """The CPU feature flags of /proc/cpuinfo (an empty set where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_has_bfloat16(flags=None):
    """True where the CPU computes bfloat16 natively (AVX512_BF16, or AMX's bf16 tiles)."""
    flags = _cpu_flags() if flags is None else set(flags)
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def gpu_compute_capabilities():
    """(major, minor) of every visible GPU, as TensorFlow reports them."""
    import tensorflow as tf

    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        capability = details.get("compute_capability")
        if capability:
            capabilities.append(tuple(capability))
    return capabilities


def resolve_precision(value, cpu_flags=None, gpus=None):
    """The compute precision of a `train.mixed_precision` setting: "float32", "bfloat16"
    or "float16".

    Args:
        value: "none", "bfloat16", "float16" or "auto"; None is "none".
        cpu_flags: iterable of str or None. The CPU's feature flags (/proc/cpuinfo when None).
        gpus: list of (major, minor) or None. The GPUs' compute capabilities (asked of
            TensorFlow when None).
    """
    if value is None:
        value = "none"
    if value not in PRECISIONS:
        raise KerasSaatError(f"mixed_precision {value!r}: expected one of {', '.join(PRECISIONS)}")
    if value == "none":
        return "float32"
    if value != "auto":
        return value
    gpus = gpu_compute_capabilities() if gpus is None else list(gpus)
    if gpus:
        return "bfloat16" if min(gpus) >= (8, 0) else "float16"
    return "bfloat16" if cpu_has_bfloat16(cpu_flags) else "float32"


@contextlib.contextmanager
def dtype_policy(precision):
    """The Keras dtype policy of `precision` while building a model; the previous one after."""
    import keras

    if precision not in POLICIES:
        precision = resolve_precision(precision)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(POLICIES[precision])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def set_tf32(enabled):
    """TF32 tensor-core matmuls on Ampere and later GPUs (TensorFlow's default: on)."""
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(bool(enabled))
