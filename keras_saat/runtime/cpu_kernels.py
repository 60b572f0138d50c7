"""oneDNN's CPU kernels for training, where TensorFlow leaves them off: it turns them on
only on CPUs with AVX512_VNNI, AVX512_BF16 or AMX (reading TF_ENABLE_ONEDNN_OPTS once, at
import), though on AVX2-only CPUs they train the Shapes CNN and the decoder faster too.
`TF_ENABLE_ONEDNN_OPTS=0` keeps the stock kernels. Exports and serving keep TensorFlow's
default, so an export's encoder chunking follows the serving machine's kernels.
"""

import os
import sys

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def prefer_onednn():
    """Sets TF_ENABLE_ONEDNN_OPTS=1 where it is unset; returns whether it took effect (not
    when the user set it or TensorFlow is already imported)."""
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
