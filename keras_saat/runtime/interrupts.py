"""SIGTERM is SIGINT: what batch schedulers, systemd and Kubernetes send to stop a
process ends a command as Ctrl-C does, its temporaries removed and its work kept.

Outside `stop_at_step_boundaries`, either signal raises KeyboardInterrupt at once. Inside
(the training loop), the first one is noted and the loop stops at its next step
boundary, where a checkpoint is consistent; a second one raises at once.
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
    """SIGINT and SIGTERM stop this process through KeyboardInterrupt (main thread only:
    Python runs handlers there)."""
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
