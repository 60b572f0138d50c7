"""User-facing errors: the command line prints their message, never a traceback."""

import difflib
import errno
import re


class KerasSaatError(Exception):
    """An error caused by the user's input; the command line prints its message (what is
    wrong, what to do) and exits with status 2."""


def did_you_mean(name, candidates):
    """Returns ' (did you mean "x"?)' for the closest candidate, or ''."""
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.5)
    return f' (did you mean "{close[0]}"?)' if close else ""


# Why a write fails, by errno and by the words TensorFlow's file system puts in its errors
# (its ResourceExhaustedError also means a full disk, which is not out of memory).
WRITE_FAILURES = (
    (errno.ENOSPC, "No space left on device", "the disk is full: free some space"),
    (errno.EDQUOT, "Disk quota exceeded", "the disk quota is used up: free some space"),
    (errno.EROFS, "Read-only file system", "the file system is read-only"),
    (errno.EACCES, "Permission denied", "permission denied"),
    (errno.EPERM, "Operation not permitted", "permission denied"),
    (errno.EFBIG, "File too large", "the file is larger than the file system allows"),
)
_TF_PATH = re.compile(r"(/[^\s:;,'\"]+)")


class FileWriteError(KerasSaatError):
    """A file could not be written: the disk is full, the folder read-only, ..."""


def write_failure(err, path=None):
    """The one-line message for `err` when it is a failed write (OSError or TensorFlow's),
    naming the file and the cause; else ""."""
    number, text = getattr(err, "errno", None), str(err)
    for code, words, cause in WRITE_FAILURES:
        if number == code or (not isinstance(err, OSError) and words in text):
            where = path or getattr(err, "filename", None)
            if where is None and (found := _TF_PATH.search(text)):
                where = found.group(1)
            return f"cannot write {where or 'a file'}: {cause}"
    return ""


def out_of_memory(err):
    """The one-line message for `err` when it is Python's or TensorFlow's out-of-memory
    error (not a full disk, which TensorFlow reports alike), else ""."""
    name = type(err).__name__
    if not (isinstance(err, MemoryError) or name == "ResourceExhaustedError") or write_failure(err):
        return ""
    return (
        f"out of memory ({name}): the settings ask for more memory than this machine has; "
        "lower the batch size, the model's sizes or data.shuffle_buffer (--verbose shows "
        "the traceback)"
    )
