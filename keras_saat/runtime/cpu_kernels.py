"""oneDNN's CPU kernels for training, where TensorFlow leaves them off.

TensorFlow's x86 builds carry two sets of CPU kernels: its own (Eigen) and oneDNN's.
It turns oneDNN's on by default only on CPUs with AVX512_VNNI, AVX512_BF16 or AMX, and
reads the environment variable TF_ENABLE_ONEDNN_OPTS once, when it is imported. On
other CPUs (AVX2 only) oneDNN's kernels train the Shapes CNN and the decoder faster too.

`prefer_onednn()` turns them on for this process unless the environment already says
either way. The command line calls it for `train` and `demo`, before it imports
TensorFlow; `TF_ENABLE_ONEDNN_OPTS=0` keeps TensorFlow's own kernels. Results differ
from the stock kernels' in the last bits (another summation order), as TensorFlow's
start-up line says. Exports and serving are left to TensorFlow's default: the exported
graph's encoder chunking follows the exporting process's kernels
(`export.encoder_chunk`), which should be the serving machine's.
"""

import os
import sys

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def prefer_onednn():
    """Sets TF_ENABLE_ONEDNN_OPTS=1 where it is unset; returns whether it took effect.

    False when the variable was already set (the user's choice stands, whatever it is)
    or TensorFlow is already imported (too late: it read the variable then).
    """
    if VARIABLE in os.environ or "tensorflow" in sys.modules:
        return False
    os.environ[VARIABLE] = "1"
    return True


def onednn_enabled():
    """Whether this process runs TensorFlow's oneDNN CPU kernels (False when unknown)."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return False
