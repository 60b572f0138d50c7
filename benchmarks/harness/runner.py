"""Running a part: each in a fresh Python process, so its peak resident memory is its
own and no compiled function or cache carries over between parts."""

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

# The checkout: a part's process imports `benchmarks` and `tests.support` from here.
ROOT = Path(__file__).resolve().parents[2]


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def on_gpu():
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def run_in_subprocess(name, *args, env=None, timeout=None):
    """Runs the registered part `name` with `args` in a fresh process; returns its row.
    Raises RuntimeError when the part fails or runs past `timeout` seconds (killed)."""
    # The part runs as the command line runs: malloc tuned first (keras_saat/runtime/memory.py).
    code = (
        "import json, sys; from keras_saat.runtime.memory import tune_malloc; tune_malloc(); "
        "from keras_saat.runtime.xla import set_xla_defaults; set_xla_defaults(); "
        "from benchmarks.harness.parts import run_part; "
        "print('BENCH ' + json.dumps(run_part(*json.loads(sys.argv[1]))))"
    )
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps([name, *args])],
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {}), "PYTHONPATH": path},
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"bench part {name} {args} ran past {timeout:.0f} s (killed)") from err
    for line in done.stdout.splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError(f"bench part {name} {args} failed:\n{done.stderr[-3000:]}")


def machine():
    import platform

    return {
        "cpu": _cpu_model() or platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def _cpu_model():
    """The CPU's model name from /proc/cpuinfo, where there is one."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
