"""The crafted hostile inputs as cases: what the hostile-input tests build and the
bench's `hostile` part measures (`benchmarks.harness.hostile`).

A `HostileCase` is one attack from `docs/guides/hostile-input.md`: a crafted input
built small (a forged header, not decoded gigabytes) and handed to the code a user or
a client reaches (the export's decode graph, the checkpoint and preset readers, the
development server's request checks, the command line). The bench runs each case in a
fresh process, so its peak resident memory is its own; the `baseline` case imports
TensorFlow and does nothing, the floor the others stand on.

The cases live beside the code they attack, one module a class of input
(`CASE_MODULES`); the tests build their crafted inputs from the same modules.
"""

import dataclasses
import importlib
from collections.abc import Callable

# The modules whose `CASES` lists are the part's rows, in the guide's order.
CASE_MODULES = (
    "tests.support.crafted_images",
    "tests.support.crafted_checkpoints",
    "tests.support.crafted_presets",
    "tests.support.crafted_requests",
    "tests.support.crafted_settings",
    "tests.support.crafted_files",
)


@dataclasses.dataclass(frozen=True)
class HostileCase:
    """One crafted input and what answers it.

    Args:
        name: str. The row's name (`jpeg_hidden_sof`).
        area: str. Where it arrives: "export graph", "untrusted files", "server" or
            "command line".
        bound: str. The bound the guide promises for it, in a few words.
        run: callable. `run(scratch: Path) -> str`: builds the input under `scratch`,
            hands it to the code it attacks, and returns the answer a user sees (the
            per-item error or the command's one-line error); "" if it was accepted.
    """

    name: str
    area: str
    bound: str
    run: Callable


def _baseline(scratch):
    import tensorflow as tf

    tf.constant(0)
    return "(no input: TensorFlow imported)"


BASELINE = HostileCase("baseline", "none", "TensorFlow imported, nothing else", _baseline)


def error_line(call):
    """The one line a user sees: the KerasSaatError `call()` raises ("" when it returns)."""
    from keras_saat.errors import KerasSaatError

    try:
        call()
    except KerasSaatError as err:
        return str(err)
    return ""


def hostile_cases():
    """Every registered case, the baseline first."""
    cases = [BASELINE]
    for module in CASE_MODULES:
        cases += importlib.import_module(module).CASES
    return cases


def case_names():
    return [case.name for case in hostile_cases()]
