"""tune_malloc: glibc's settings are in force after it, read back from the process.

What the settings are for (TensorFlow's large outputs reusing freed memory instead of
faulting in fresh pages) depends on the machine; `python -m benchmarks --part malloc`
measures it. These tests check what the code controls: that the three settings take
effect, and that the opt-out leaves glibc's defaults alone.
"""

import json
import os
import subprocess
import sys

import pytest

# A fresh interpreter tunes (or not), then asks glibc what it did with a 64 MiB block
# (mapped on its own, or carved from the heap and kept after free) and how many heaps
# (arenas) serve four threads that each allocate once.
CHILD = """
import ctypes, json, os, sys, tempfile, threading
from keras_saat.runtime.memory import malloc_tuned, tune_malloc

applied = tune_malloc() if sys.argv[1] == "tune" else False
libc = ctypes.CDLL(None)

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = libc.mallinfo2()
block = libc.malloc(64 << 20)
during = libc.mallinfo2()
libc.free(block)
after = libc.mallinfo2()

def allocate():
    libc.free(libc.malloc(1024))

threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads:
    t.start()
    t.join()
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
path = tempfile.mktemp()
handle = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, handle)
libc.fclose(handle)
with open(path) as f:
    heaps = f.read().count("<heap nr=")
os.unlink(path)
print(json.dumps({
    "applied": applied,
    "tuned": malloc_tuned(),
    "mapped": during.hblks - before.hblks,
    "heap_grew": during.arena - before.arena,
    "heap_kept": after.arena - before.arena,
    "heaps": heaps,
}))
"""

BLOCK = 64 << 20
MOST = BLOCK * 9 // 10  # the heap may already hold some free memory to start the block in

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's mallopt",
)


def child(mode, **env):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environment.pop("KERAS_SAAT_MALLOC", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, **env},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_tuned(state):
    # M_MMAP_MAX 0: the block comes from the heap, not a mapping of its own.
    assert state["mapped"] == 0 and state["heap_grew"] >= MOST, state
    # M_TRIM_THRESHOLD 2^31 - 1: freeing it does not hand the heap's top back.
    assert state["heap_kept"] >= MOST, state
    # M_ARENA_MAX 1: every thread allocates from the one main heap.
    assert state["heaps"] == 1, state


def assert_defaults(state):
    assert state["mapped"] == 1 and state["heap_kept"] < MOST, state
    assert state["heaps"] > 1, state


def test_tune_malloc_puts_the_three_settings_in_force():
    tuned = child("tune")
    assert tuned["applied"] and tuned["tuned"]
    assert_tuned(tuned)


def test_without_tuning_glibc_keeps_its_defaults():
    default = child("default")
    assert not default["applied"] and not default["tuned"]
    assert_defaults(default)


def test_the_environment_opts_out():
    off = child("tune", KERAS_SAAT_MALLOC="system")
    assert not off["applied"] and not off["tuned"]
    assert_defaults(off)


def test_the_environment_variables_count_as_tuned():
    from keras_saat.runtime.memory import ENVIRONMENT

    by_environment = child("default", **ENVIRONMENT)
    assert by_environment["tuned"] and not by_environment["applied"]
    assert_tuned(by_environment)
