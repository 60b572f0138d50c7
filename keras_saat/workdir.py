"""The files and folders of a workdir, each name spelled once.

config.yaml            the resolved experiment config
vocab.txt              the vocabulary, one token a line in id order
data/                  the generated Shapes world (when the dataset is shapes)
backbone.weights.h5    the pre-trained Shapes CNN
backbone.json          the Shapes CNN variant those weights were pre-trained for, and how
features/              the feature cache
checkpoints/           tf.train checkpoints, for resuming
logs/                  TensorBoard
history.json           per-epoch loss and validation scores
model.keras            the model with the best validation BLEU-4
eval/<split>/          predictions.json and metrics.json
xla_cache/             XLA's persistent compilation cache (a resumed run skips the compile)
train.lock             held while a run writes the workdir (who holds it, inside)
"""

import contextlib
import os
import socket
import stat
from pathlib import Path

from keras_saat.errors import KerasSaatError

CONFIG_FILE = "config.yaml"
VOCAB_FILE = "vocab.txt"
DATA_DIR = "data"
BACKBONE_WEIGHTS_FILE = "backbone.weights.h5"
BACKBONE_RECORD_FILE = "backbone.json"
FEATURES_DIR = "features"
CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"
HISTORY_FILE = "history.json"
MODEL_FILE = "model.keras"
EVAL_DIR = "eval"
PREDICTIONS_FILE = "predictions.json"
METRICS_FILE = "metrics.json"
XLA_CACHE_DIR = "xla_cache"
LOCK_FILE = "train.lock"


def cache_owner(directory):
    """The workdir whose feature cache `directory` is (a folder named FEATURES_DIR), else None."""
    directory = Path(os.path.abspath(directory))
    return directory.parent if directory.name == FEATURES_DIR else None


@contextlib.contextmanager
def workdir_lock(workdir, command):
    """Holds WORKDIR/train.lock (an OS lock, gone with the process) while `command` writes
    the workdir; a KerasSaatError when another process holds it, or the lock's name is
    taken by a link or something other than a plain file."""
    from filelock import FileLock, Timeout

    path = Path(workdir) / LOCK_FILE
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        owner = ""
        with contextlib.suppress(OSError):  # Windows locks the bytes too
            owner = path.read_text(encoding="utf-8", errors="replace")[:500].strip()
        raise KerasSaatError(
            f"{workdir} is in use: {owner or 'another process'}; wait for that run to end, "
            "or give another --workdir"
        ) from None
    except OSError as err:  # O_NOFOLLOW: a link planted here would have its target written
        raise KerasSaatError(
            f"{path} cannot be opened as the workdir's lock ({err.strerror}); it must be a "
            "plain file: remove it and run again"
        ) from None
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:  # another's file
                raise KerasSaatError(
                    f"{path} is not a plain file of its own; remove it and run again"
                )
            holder = f"`keras-saat {command}`, process {os.getpid()} on {socket.gethostname()}\n"
            with contextlib.suppress(OSError):  # Windows locks the bytes: no owner is named
                os.ftruncate(fd, 0)
                os.write(fd, holder.encode())
        finally:
            os.close(fd)
        yield
    finally:
        lock.release()
