"""One writer of a workdir's feature cache at a time: `evaluate` beside an `extract-features`
(or a `train`) that fills the same cache waits for its lock, then reads or writes."""

import shutil
import socket
import subprocess
import sys
import time

import pytest

from keras_saat.data.feature_cache.feature_cache import FeatureCache
from tests.helpers import ROOT

CLI = [sys.executable, "-m", "keras_saat.cli"]
HOLD = """
import sys
from keras_saat.workdir import workdir_lock
with workdir_lock(sys.argv[1], "extract-features"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def uncached(trained_workdir, tmp_path):
    """A copy of the trained workdir without its feature cache."""
    workdir = tmp_path / "run"
    shutil.copytree(trained_workdir, workdir)
    shutil.rmtree(workdir / "features")
    return workdir


def evaluate(workdir):
    argv = ["evaluate", "--workdir", str(workdir), "--split", "val", "--beam-size", "1"]
    return subprocess.Popen(
        [*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def assert_finished(directory):
    cache = FeatureCache(directory)
    assert all(s["done"] for entry in cache.index["splits"].values() for s in entry["shards"])
    assert not [p.name for p in directory.iterdir() if ".tmp" in p.name]


@pytest.mark.slow
def test_evaluate_waits_for_the_process_that_holds_the_workdir(trained_workdir, tmp_path):
    workdir = uncached(trained_workdir, tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(workdir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert holder.stdout.readline() == "held\n"
    scoring = evaluate(workdir)
    waiting = (
        f"{workdir} is in use: `keras-saat extract-features`, process {holder.pid} on "
        f"{socket.gethostname()}; waiting for it to end to write the feature cache"
    )
    deadline = time.monotonic() + 300
    for line in scoring.stdout:  # until evaluate says it waits
        if line.rstrip("\n") == waiting or time.monotonic() > deadline:
            break
    assert line.rstrip("\n") == waiting
    time.sleep(2)  # waiting, it writes nothing
    assert not (workdir / "features" / "index.json").exists()
    holder.stdin.write("\n")
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0
    out, err = scoring.communicate(timeout=600)
    assert scoring.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    assert_finished(workdir / "features")


@pytest.mark.slow
def test_evaluate_beside_extract_features_on_one_workdir(trained_workdir, tmp_path):
    """Both at once, as a user starts them: each ends well, the cache is whole."""
    workdir = uncached(trained_workdir, tmp_path)
    config = workdir / "config.yaml"
    extracting = subprocess.Popen(
        [*CLI, "extract-features", "--config", str(config), "--workdir", str(workdir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    for line in extracting.stdout:  # the lock is held and the cache being written
        if line.startswith("feature cache"):
            break
    scoring = evaluate(workdir)
    _, extract_err = extracting.communicate(timeout=600)
    _, evaluate_err = scoring.communicate(timeout=600)
    assert extracting.returncode == 0, extract_err[-3000:]
    assert scoring.returncode == 0, evaluate_err[-3000:]
    assert "Traceback" not in extract_err + evaluate_err
    assert_finished(workdir / "features")
