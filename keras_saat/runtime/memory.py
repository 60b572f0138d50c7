"""glibc malloc settings that keep TensorFlow's large CPU tensors off fresh pages.

TensorFlow allocates each op's output with the C library's malloc. With glibc's defaults,
a tensor of a few MB or more is either mapped afresh (mmap) or carved from a per-thread
heap that hands freed memory back to the kernel, so the next op's output lands on new
pages, and every 4 kB page costs a fault and zeroing when first written. Whether that
costs time depends on the machine.

`tune_malloc()` makes glibc keep it: one arena for all threads, no mmap for large blocks,
and no trimming of the heap's top. Freed memory is reused, not returned to the kernel,
so the process's resident size stays near its peak. The command line calls it before it
imports TensorFlow; set `KERAS_SAAT_MALLOC=system` to keep glibc's defaults. The
environment variables `MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=2147483647` do the same for any process, TF Serving's included.
"""

import ctypes
import os
import sys

# mallopt parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8

SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))
ENVIRONMENT = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1),
}
OPT_OUT = "KERAS_SAAT_MALLOC"

_state = {"tuned": False}


def tune_malloc():
    """Applies the settings above to this process; returns whether they are in force.

    Call it before importing TensorFlow: threads started earlier keep the arenas they
    already have. A no-op (False) off Linux, on a C library without `mallopt` (musl), and
    when the environment variable KERAS_SAAT_MALLOC is "system".
    """
    if _state["tuned"]:
        return True
    if os.environ.get(OPT_OUT, "").strip().lower() == "system":
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _state["tuned"] = all(mallopt(param, value) == 1 for param, value in SETTINGS)
    return _state["tuned"]


def malloc_tuned():
    """Whether this process runs with the settings: by `tune_malloc()` or the environment."""
    return _state["tuned"] or all(os.environ.get(k) == v for k, v in ENVIRONMENT.items())


def _host_available():
    """The host's available memory (the kernel's MemAvailable: free pages plus caches it
    can drop), or its free pages where /proc/meminfo is not there."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def device_memory():
    """(device, total bytes, free bytes): the memory of the device that trains.

    The first GPU's memory as TensorFlow's allocator holds it (a virtual device's limit
    included) less what this process has allocated on it, or the host's physical memory
    and what the kernel reports available where no GPU is visible.
    """
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
