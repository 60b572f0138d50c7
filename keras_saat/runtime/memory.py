"""glibc malloc settings that keep TensorFlow's large CPU tensors off fresh pages.

With glibc's defaults a tensor of a few MB is mmapped afresh or returned to the kernel
when freed, so the next op's output faults in and zeroes new pages. `tune_malloc()`
keeps freed memory for reuse (one arena, no mmap, no trimming); the resident size stays
near its peak. `KERAS_SAAT_MALLOC=system` keeps glibc's defaults; the variables in
`ENVIRONMENT` do the same for any process, TF Serving's included.
"""

import contextlib
import ctypes
import os
import sys

# (mallopt parameter from glibc's malloc.h, the environment variable that sets it, value)
SETTINGS = (
    (-8, "MALLOC_ARENA_MAX", 1),  # M_ARENA_MAX
    (-4, "MALLOC_MMAP_MAX_", 0),  # M_MMAP_MAX
    (-1, "MALLOC_TRIM_THRESHOLD_", 2**31 - 1),  # M_TRIM_THRESHOLD
)
ENVIRONMENT = {variable: str(value) for _, variable, value in SETTINGS}
OPT_OUT = "KERAS_SAAT_MALLOC"

_state = {"tuned": False}


def tune_malloc():
    """Applies the settings to this process before TensorFlow starts (threads keep their
    arenas); whether they are in force: not off Linux, without `mallopt` (musl), or when
    KERAS_SAAT_MALLOC is "system"."""
    if _state["tuned"]:
        return True
    if os.environ.get(OPT_OUT, "").strip().lower() == "system" or sys.platform != "linux":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _state["tuned"] = all(mallopt(param, value) == 1 for param, _, value in SETTINGS)
    return _state["tuned"]


def malloc_tuned():
    """Whether this process runs with the settings: by `tune_malloc()` or the environment."""
    return _state["tuned"] or all(os.environ.get(k) == v for k, v in ENVIRONMENT.items())


def _host_available():
    """The host's MemAvailable, or its free pages where /proc/meminfo is not there."""
    with contextlib.suppress(OSError), open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def device_memory():
    """(device, total bytes, free bytes) of the device that trains: the first GPU as
    TensorFlow's allocator holds it, or the host's memory where no GPU is visible."""
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        from tensorflow.python.client import device_lib

        for device in device_lib.list_local_devices():
            if device.device_type == "GPU":
                name, total = device.name.replace("/device:", ""), int(device.memory_limit)
                used = tf.config.experimental.get_memory_info(name)["current"]
                return name, total, max(total - used, 0)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return "CPU", total, min(_host_available(), total)
