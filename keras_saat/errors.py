"""User-facing errors: the command line prints their message, never a traceback."""

import difflib


class KerasSaatError(Exception):
    """An error caused by the user's input (a file, a name, a config value).

    The message says what is wrong and what to do; the command line prints it
    and exits with status 2.
    """


def did_you_mean(name, candidates):
    """Returns ' (did you mean "x"?)' for the closest candidate, or ''."""
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.5)
    return f' (did you mean "{close[0]}"?)' if close else ""


def out_of_memory(err):
    """The one-line message for `err` when it is Python's or TensorFlow's out-of-memory
    error, else ""."""
    name = type(err).__name__
    if not isinstance(err, MemoryError) and name != "ResourceExhaustedError":
        return ""
    return (
        f"out of memory ({name}): the settings ask for more memory than this machine has; "
        "lower the batch size, the model's sizes or data.shuffle_buffer (--verbose shows "
        "the traceback)"
    )
