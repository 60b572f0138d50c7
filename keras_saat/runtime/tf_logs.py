"""TensorFlow's C++ start-up lines kept off a command's stderr (unless `--verbose`).

TensorFlow writes several lines as it loads (oneDNN, CUDA drivers, CPU features) and
an ERROR line, `failed call to cuInit`, when it looks for a GPU on a machine without
one. A new user reads them as failures. They come two ways:

- after TensorFlow's logging starts: filtered by TF_CPP_MIN_LOG_LEVEL, read when
  TensorFlow loads; 3 leaves out INFO, WARNING and ERROR (the cuInit line is an ERROR),
  FATAL stays;
- before it starts ("All log messages before absl::InitializeLog() is called are
  written to STDERR"): written straight to file descriptor 2 while the libraries load,
  past any level. `import_tensorflow_quietly` points that descriptor at /dev/null for
  the import alone; Python's own errors still come through, as exceptions.

A TF_CPP_MIN_LOG_LEVEL in the environment is the user's and stays; `keras-saat
--verbose` does neither, and stderr shows everything TensorFlow writes.
"""

import contextlib
import os
import sys

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"


def quiet_tensorflow_logs():
    """Sets TF_CPP_MIN_LOG_LEVEL=3 where it is unset; returns whether it took effect.

    False when the user set the variable (their level stands) or TensorFlow is already
    imported (it read the variable then).
    """
    if LEVEL_VARIABLE in os.environ or "tensorflow" in sys.modules:
        return False
    os.environ[LEVEL_VARIABLE] = "3"
    return True


@contextlib.contextmanager
def _stderr_to_devnull():
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def import_tensorflow_quietly():
    """Imports TensorFlow with its pre-logging lines (written to descriptor 2) dropped.

    Does nothing when TensorFlow is already imported. An import that fails raises as
    usual (the exception carries the reason; only the C++ lines are dropped).
    """
    if "tensorflow" in sys.modules:
        return
    with _stderr_to_devnull():
        import tensorflow  # noqa: F401
