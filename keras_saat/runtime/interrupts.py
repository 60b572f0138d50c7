"""SIGTERM is SIGINT: a scheduler's stop ends a command as Ctrl-C does, temporaries removed
and work kept. Inside `stop_at_step_boundaries` the first signal is only noted, so the
training loop stops at a step boundary where a checkpoint is consistent.
"""

import contextlib
import signal
import threading

_state = {"depth": 0, "requested": None}


def _handler(signum, frame):
    name = signal.Signals(signum).name
    if _state["depth"] and _state["requested"] is None:
        _state["requested"] = name
        return
    raise KeyboardInterrupt(name)


def stop_on_signals():
    """SIGINT and SIGTERM raise KeyboardInterrupt (set from the main thread, where Python runs handlers)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _handler)


@contextlib.contextmanager
def stop_at_step_boundaries():
    """Within, a first SIGINT or SIGTERM is only noted: `stop_requested()` names it."""
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if not _state["depth"]:
            _state["requested"] = None


def stop_requested():
    """The name of the signal that asked to stop ("SIGTERM", "SIGINT"), or None."""
    return _state["requested"]
