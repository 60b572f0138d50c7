"""TensorFlow's C++ start-up lines, which a new user reads as failures (`failed call to
cuInit` on a machine without a GPU), kept off a command's stderr unless `--verbose`.
TF_CPP_MIN_LOG_LEVEL=3 drops those written after logging starts; those written before go
straight to descriptor 2, so `import_tensorflow_quietly` points it at /dev/null for the
import alone. A level the user set stays.
"""

import os
import sys

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"


def quiet_tensorflow_logs():
    """Sets TF_CPP_MIN_LOG_LEVEL=3 where it is unset; returns whether it took effect (not when
    the user set it or TensorFlow is already imported)."""
    if LEVEL_VARIABLE in os.environ or "tensorflow" in sys.modules:
        return False
    os.environ[LEVEL_VARIABLE] = "3"
    return True


def import_tensorflow_quietly():
    """Imports TensorFlow with descriptor 2 on /dev/null (a no-op once imported); a failing
    import still raises."""
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
