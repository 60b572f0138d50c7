"""prefer_onednn: the command line trains with oneDNN's CPU kernels unless told otherwise.

Whether oneDNN is faster depends on the machine (docs/performance.md); these tests
check what the code controls, in fresh interpreters (TensorFlow reads the variable once,
when it is imported): that `train` and `demo` turn the kernels on before TensorFlow
starts, that an explicit TF_ENABLE_ONEDNN_OPTS stands, and that other commands leave
TensorFlow's default alone.
"""

import json
import os
import subprocess
import sys

import pytest

from keras_saat.runtime.cpu_kernels import VARIABLE, prefer_onednn
from tests.helpers import DEFAULTS

# Runs the command line in-process, then reports the variable and what TensorFlow did.
CHILD = """
import json, os, sys
from keras_saat.cli import main

code = main(sys.argv[1:])
from keras_saat.runtime.cpu_kernels import onednn_enabled

print(json.dumps({"code": code, "variable": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                  "onednn": onednn_enabled()}))
"""


def _run(argv, variable=None):
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if variable is not None:
        env[VARIABLE] = variable
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_train_turns_onednn_on_before_tensorflow_starts(tmp_path):
    # An unknown backbone fails after TensorFlow is imported, so it shows what it read.
    argv = ["train", "--config", DEFAULTS, "--workdir", str(tmp_path), "--set"]
    report = _run([*argv, "model.backbone=nope"])
    assert report == {"code": 2, "variable": "1", "onednn": True}


@pytest.mark.slow
def test_an_explicit_setting_stands(tmp_path):
    argv = ["train", "--config", DEFAULTS, "--workdir", str(tmp_path), "--set"]
    report = _run([*argv, "model.backbone=nope"], variable="0")
    assert report == {"code": 2, "variable": "0", "onednn": False}


def test_other_commands_keep_tensorflows_default(tmp_path):
    report = _run(
        ["make-shapes", "--out", str(tmp_path), "--train", "2", "--val", "1", "--test", "1"]
    )
    assert report["code"] == 0 and report["variable"] is None


def test_too_late_once_tensorflow_is_imported(monkeypatch):
    import tensorflow  # noqa: F401  (the test process has it already)

    monkeypatch.delenv(VARIABLE, raising=False)
    assert prefer_onednn() is False
    assert VARIABLE not in os.environ


@pytest.mark.parametrize("value", ["0", "1"])
def test_a_set_variable_is_left_alone(monkeypatch, value):
    monkeypatch.setenv(VARIABLE, value)
    assert prefer_onednn() is False
    assert os.environ[VARIABLE] == value
