"""Numeric precision: mixed-precision policies and TF32.

`train.mixed_precision` "auto" is bfloat16 on CPUs with AVX512_BF16 or AMX and on GPUs of
compute capability >= 8.0, float16 (with loss scaling) on older GPUs, float32 otherwise.
Softmaxes, losses, baseline, beam scores and variables stay float32, so a model trained in
bfloat16 loads anywhere. TF32 (about 1e-3 relative error) stays on for training, as
TensorFlow has it; `set_tf32(False)` gives bitwise-reproducible float32.
"""

import contextlib

from keras_saat.errors import KerasSaatError

PRECISIONS = ("none", "bfloat16", "float16", "auto")

# The Keras dtype policy of each resolved precision.
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def _cpu_flags():
    """The CPU feature flags of /proc/cpuinfo (an empty set where it cannot be read)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
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

    gpus = tf.config.list_physical_devices("GPU")
    details = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
    return [tuple(d["compute_capability"]) for d in details if d.get("compute_capability")]


def resolve_precision(value, cpu_flags=None, gpus=None):
    """The compute precision ("float32", "bfloat16" or "float16") of a `train.mixed_precision`
    `value` (None is "none"), given the CPU's feature flags (None: /proc/cpuinfo's) and the
    GPUs' (major, minor) compute capabilities (None: TensorFlow's)."""
    if value in (None, "none"):
        return "float32"
    if value not in PRECISIONS:
        raise KerasSaatError(f"mixed_precision {value!r}: expected one of {', '.join(PRECISIONS)}")
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
