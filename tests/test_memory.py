"""tune_malloc: TensorFlow's large outputs stop landing on fresh pages, and it can be turned off."""

import json
import os
import subprocess
import sys

import pytest

# A fresh interpreter: tunes (or not) before importing TensorFlow, then counts the page
# faults of a tanh over a 25 MB tensor: the mean of 20 calls after 100 warm-up calls, in
# which the tuned heap grows to its working size.
CHILD = """
import json, resource, sys
from keras_saat.memory import malloc_tuned, tune_malloc
applied = tune_malloc() if sys.argv[1] == "tune" else False
import tensorflow as tf
x = tf.random.normal((64, 196, 512))
f = tf.function(lambda x: tf.tanh(x + 1.0))
for _ in range(100):
    f(x).numpy()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    f(x).numpy()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
print(json.dumps({"applied": applied, "tuned": malloc_tuned(), "faults": faults}))
"""

PAGES = 64 * 196 * 512 * 4 // 4096  # one output tensor, in 4 kB pages: 6272


def child(mode, **env):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_malloc_reuses_memory_for_tensorflow_outputs():
    default = child("default")
    tuned = child("tune")
    assert not default["tuned"] and tuned["applied"] and tuned["tuned"]
    # glibc's defaults fault in most of the output's pages on most calls; tuned, the
    # freed memory is reused.
    assert default["faults"] > PAGES // 4, default
    assert tuned["faults"] < PAGES // 20, tuned


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_environment_opts_out_and_the_variables_count_as_tuned():
    from keras_saat.memory import ENVIRONMENT

    off = child("tune", KERAS_SAAT_MALLOC="system")
    assert not off["applied"] and not off["tuned"]
    assert off["faults"] > PAGES // 4, off
    by_environment = child("default", **ENVIRONMENT)
    assert by_environment["tuned"] and not by_environment["applied"]
    assert by_environment["faults"] < PAGES // 20, by_environment
