"""Numeric precision: mixed-precision policies and TF32.

`train.mixed_precision` takes one of:

    none       float32 everywhere
    bfloat16   Keras's mixed_bfloat16: bfloat16 compute, float32 variables, no loss scaling
    float16    Keras's mixed_float16: float16 compute, float32 variables, dynamic loss scaling
    auto       bfloat16 on CPUs that report AVX512_BF16 or AMX and on GPUs of compute
               capability >= 8.0 (Ampere and later); float16 on older GPUs; none
               otherwise

Whatever the policy, the softmax over locations, the log-softmax over words, the
losses, the REINFORCE baseline and beam scores are computed in float32 (the layers
cast), and checkpoints and `.keras` files hold float32 variables, so a model trained
in bfloat16 loads anywhere.

TF32: TensorFlow runs float32 matmuls and convolutions on Ampere and later GPUs with
TF32 tensor cores by default (10-bit mantissa products, float32 sums): faster, and
about 1e-3 relative error. It is left on for training; `set_tf32(False)` (or
`tf.config.experimental.enable_tensor_float_32_execution(False)`) gives full float32
for bitwise-reproducible numbers. CPUs are not affected.
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
    """The compute precision of a `train.mixed_precision` setting: "float32",
    "bfloat16" or "float16".

    Args:
        value: "none", "bfloat16", "float16" or "auto"; None is "none".
        cpu_flags: iterable of str or None. The CPU's feature flags; read from
            /proc/cpuinfo when None.
        gpus: list of (major, minor) or None. The GPUs' compute capabilities; asked of
            TensorFlow when None.
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
    """The Keras dtype policy of `precision` (a resolved name or a setting) while
    building (and training) a model; the previous policy afterwards."""
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
