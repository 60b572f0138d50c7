"""tf.distribute and resume, each in fresh processes (device layout and TF_CONFIG are per process)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def python(script, *args, env=None, timeout=600):
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )


MIRRORED = """
import sys
import numpy as np
import tensorflow as tf
if sys.argv[1] == "mirrored":  # two logical CPU devices, before TensorFlow starts
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
else:
    strategy = tf.distribute.get_strategy()
import keras
from keras_saat import Captioner
from keras_saat.text import PAD_ID, Vocabulary
from keras_saat.training.trainer import Trainer

words = "a red blue circle square at the top left on right".split()
vocab = Vocabulary.build([words])
rng = np.random.default_rng(0)
features = rng.normal(size=(32, 64, 128)).astype("float32")
captions = [list(rng.choice(words, size=rng.integers(2, 6))) for _ in range(32)]
tokens = np.array(vocab.encode_batch(captions, 6))
# Padding rows (a padded last batch's) fill most of the first replica's half of each global
# batch: 3 captions there, 8 in the other; the loss is the mean over the 11.
tokens[np.arange(32) % 16 < 5] = PAD_ID
data = tf.data.Dataset.from_tensor_slices(
    {"features": features, "tokens": tokens}
).batch(16, drop_remainder=True)
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = Captioner(vocab.words, feature_dim=16, embedding_dim=8, lstm_units=12,
                      attention_units=8, dropout=0.0, seed=1)
    optimizer = keras.optimizers.Adam(1e-2)
# The same kernels in both processes: XLA cannot compile over logical CPU devices, and Adam
# turns the last-bit differences of XLA's kernels on near-zero gradients into lr-sized steps.
trainer = Trainer(model, optimizer, strategy, clipnorm=1.0, jit_compile=False)
print("replicas", strategy.num_replicas_in_sync)
for _ in range(3):  # 6 steps of a global batch of 16
    for batch in trainer.distribute(data):
        trainer.train_step(batch)
np.savez(sys.argv[2], *[np.asarray(v) for v in model.trainable_variables])
"""


def test_mirrored_strategy_matches_one_device(tmp_path):
    results = {}
    for mode in ("single", "mirrored"):
        out = python(MIRRORED, mode, str(tmp_path / f"{mode}.npz"))
        assert out.returncode == 0, out.stderr[-3000:]
        assert f"replicas {2 if mode == 'mirrored' else 1}" in out.stdout
        with np.load(tmp_path / f"{mode}.npz") as weights:
            results[mode] = [weights[k] for k in sorted(weights, key=lambda k: int(k[4:]))]
    assert len(results["single"]) == len(results["mirrored"]) > 10
    for a, b in zip(results["single"], results["mirrored"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def tiny_config(shapes_dir, **train):
    config = {
        "model": {
            "backbone": "shapes_cnn",
            "feature_dim": 16,
            "embedding_dim": 16,
            "lstm_units": 32,
            "attention_units": 16,
        },
        "data": {"dataset": "karpathy", "path": str(shapes_dir / "dataset_shapes.json")},
        "train": {"batch_size": 16, "epochs": 1, "log_every": 5, "summary_images": 1, **train},
        "decode": {"max_length": 8, "meteor": False},  # its test scores are not read
    }
    return config


TRAIN = """
import json, os, signal, sys
from keras_saat.config import from_dict
from keras_saat.experiment import train

config = from_dict(json.loads(sys.argv[2]))
kill_at, _, kill_with = (sys.argv[3] if len(sys.argv) > 3 else "0").partition(":")
kill_at, kill_with = int(kill_at), getattr(signal, kill_with or "SIGKILL")

import keras
from keras_saat.runtime.interrupts import stop_on_signals

class KillAt(keras.callbacks.Callback):  # SIGKILL: no clean-up, no flush, as when a machine
    steps = 0                                # or the OOM killer stops a run; SIGTERM: as a
                                             # scheduler stops it
    def on_train_batch_end(self, batch, logs=None):
        KillAt.steps += 1
        if KillAt.steps == kill_at:
            os.kill(os.getpid(), kill_with)

stop_on_signals()  # as the command line does
try:
    result = train(config, sys.argv[1], callbacks=[KillAt()] if kill_at else [])
except KeyboardInterrupt as err:
    print("STOPPED", err)
    sys.exit(143)
print("RESULT", json.dumps({"chief": result["chief"], "steps": result.get("training", result)["global_step"]}))
"""


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_multi_worker_mirrored_two_processes(tmp_path, shapes_dir):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    config = json.dumps(tiny_config(shapes_dir, distribute="multi_worker"))
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        workers.append(
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(TRAIN), str(tmp_path / f"w{index}"), config],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "TF_CONFIG": tf_config, "PYTHONPATH": str(ROOT)},
            )
        )
    outputs = [w.communicate(timeout=600) for w in workers]
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr[-3000:]
    chief, other = (json.loads(o[0].split("RESULT ")[1]) for o in outputs)
    # 200 captions at batch 16: 12 full batches and one padded (its 8 captions all on the
    # first worker, the second's rows padding).
    assert chief == {"chief": True, "steps": 13} and other == {"chief": False, "steps": 13}
    assert "distribute multi_worker: 2 replicas in sync" in outputs[0][0]
    # data.resident_features auto: each worker holds the (small) train split and gathers.
    assert all("features resident on CPU: 40 images" in o[0] for o in outputs)
    # Only the chief keeps checkpoints, the best model and the scores.
    assert tf.train.latest_checkpoint(str(tmp_path / "w0" / "checkpoints")).endswith("ckpt-13")
    assert (tmp_path / "w0" / "model.keras").exists()
    assert (tmp_path / "w0" / "eval" / "test" / "metrics.json").exists()
    assert not (tmp_path / "w1" / "checkpoints").exists()
    assert not (tmp_path / "w1" / "model.keras").exists()


def checkpoint_values(workdir):
    path = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    names = [n for n, _ in tf.train.list_variables(path) if "OBJECT_GRAPH" not in n]
    return path, {n: reader.get_tensor(n) for n in names}


def test_killed_run_resumes_to_the_same_weights(tmp_path, shapes_dir):
    """Hard attention with dropout, killed (SIGKILL) then stopped (SIGTERM) mid-epoch: the
    random streams, the baseline, the data position and the epoch's history resume. The uninterrupted run streams the features from the cache; the killed and
    resumed one holds them on the device and gathers them by index: the same batches."""
    config = tiny_config(
        shapes_dir, epochs=2, checkpoint_every=4, deterministic=True, summary_images=0
    )
    config["model"].update(attention="hard", dropout=0.3)
    config["data"]["batching"] = "per_caption"  # auto would batch streamed features per image
    streamed = json.dumps({**config, "data": {**config["data"], "resident_features": False}})
    resident = json.dumps({**config, "data": {**config["data"], "resident_features": True}})

    straight = python(TRAIN, str(tmp_path / "straight"), streamed)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "features resident" not in straight.stdout

    # The same images and frozen backbone: the straight run's feature cache serves both.
    shutil.copytree(tmp_path / "straight" / "features", tmp_path / "resumed" / "features")
    killed = python(TRAIN, str(tmp_path / "resumed"), resident, "6")  # mid-epoch, after ckpt-4
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "extract train: cached (40 images)" in killed.stdout
    assert "features resident on CPU: 40 images" in killed.stdout
    assert tf.train.latest_checkpoint(str(tmp_path / "resumed" / "checkpoints")).endswith("ckpt-4")
    # Then a SIGTERM 3 steps into the resumed run: it stops at that step, with a checkpoint.
    stopped = python(TRAIN, str(tmp_path / "resumed"), resident, "3:SIGTERM")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "step 4 of the epoch" in stopped.stdout and "STOPPED SIGTERM" in stopped.stdout
    assert "SIGTERM: stopped at step 7 with a checkpoint" in stopped.stdout
    assert tf.train.latest_checkpoint(str(tmp_path / "resumed" / "checkpoints")).endswith("ckpt-7")
    resumed = python(TRAIN, str(tmp_path / "resumed"), resident)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout and "step 7 of the epoch" in resumed.stdout

    path_a, a = checkpoint_values(tmp_path / "straight")
    path_b, b = checkpoint_values(tmp_path / "resumed")
    assert path_a.endswith("ckpt-26") and path_b.endswith("ckpt-26")  # 2 epochs of 13 steps
    assert a.keys() == b.keys()
    assert any("seed_generator" in str(v) for v in a) or len(a) > 40
    for name in a:
        if name.startswith("save_counter"):  # how many checkpoints were written: one more
            continue  # for the SIGTERM's
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    history_a = json.loads((tmp_path / "straight" / "history.json").read_text())
    history_b = json.loads((tmp_path / "resumed" / "history.json").read_text())
    # The history of an epoch killed and stopped twice is the uninterrupted one's, but for
    # its wall-clock seconds: the epoch's running sums resume with the step.
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in history_a] == [
        {k: v for k, v in h.items() if k != "seconds"} for h in history_b
    ]
