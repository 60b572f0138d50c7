"""The command line: user errors end with one clear message, and the demo runs end to end
(the run the tutorials share, `tutorial_runs`)."""

import json
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_saat import load_captioner
from keras_saat.cli import main
from keras_saat.config import load_config
from keras_saat.config_files import recipe_path
from keras_saat.data import read_karpathy
from keras_saat.evaluation.coco_metrics import java_available
from keras_saat.evaluation.robustness import SHIFTS
from keras_saat.training.trainer import resolve_jit_compile
from tests.helpers import DEFAULTS, TUTORIALS
from tools.docs import DEMO, MIN_BLEU_4


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_make_shapes(tmp_path, capsys):
    code, out, _ = run(
        capsys, "make-shapes", "--out", str(tmp_path), "--train", "3", "--val", "1", "--test", "1"
    )
    assert code == 0 and "wrote 5 images" in out
    assert read_karpathy(tmp_path / "dataset_shapes.json").counts() == {
        "train": 3,
        "val": 1,
        "test": 1,
    }


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            ["model.atention=soft"],
            "unknown config key 'model.atention' (did you mean \"attention\"?)",
        ),
        (["model.backbone=vgg17"], "unknown backbone 'vgg17'"),
        (
            ["data.dataset=karpathy", "data.path=/nonexistent/dataset.json"],
            "dataset file not found",
        ),
        (["train.epochs=ten"], "train.epochs: 'ten' is not a valid int"),
        (
            [
                *("data.shapes_train=2", "data.shapes_val=1", "data.shapes_test=1"),
                *("model.backbone=vgg16", "model.backbone_weights=shapes"),
            ],
            "backbone_weights 'shapes' (attribute pre-training) needs a Shapes CNN backbone "
            "(shapes_cnn, shapes_cnn_small, shapes_cnn_norm, shapes_cnn_small_norm); got vgg16",
        ),
    ],
)
def test_user_errors_exit_2_with_one_message(tmp_path, capsys, settings, message):
    argv = ["train", "--config", DEFAULTS, "--workdir", str(tmp_path / "w")]
    for setting in settings:
        argv += ["--set", setting]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("keras-saat: error: ") and message in err and err.count("\n") == 1


def test_malformed_dataset_and_missing_config_files(tmp_path, capsys):
    bad = tmp_path / "dataset.json"
    bad.write_text('{"images": [{"filename": "a.png"')
    code, _, err = run(
        capsys,
        "train",
        "--config",
        DEFAULTS,
        "--workdir",
        str(tmp_path / "w"),
        "--set",
        "data.dataset=karpathy",
        "--set",
        f"data.path={bad}",
    )
    assert code == 2 and "is not valid JSON" in err and "line 1" in err
    code, _, err = run(
        capsys, "train", "--workdir", str(tmp_path), "--config", str(tmp_path / "none.yaml")
    )
    assert code == 2 and "config file not found" in err


def test_train_needs_a_config(tmp_path, capsys):
    """No silent training on the defaults' random, frozen backbone: without --config,
    train resumes a workdir with its own config.yaml, and asks for one where there is none."""
    code, _, err = run(capsys, "train", "--workdir", str(tmp_path))
    assert code == 2
    assert f"--workdir {tmp_path} holds no config.yaml to resume; give --config" in err


@pytest.mark.slow
def test_the_installed_command_prints_no_traceback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_saat.cli",
            "train",
            "--config",
            DEFAULTS,
            "--workdir",
            str(tmp_path),
            "--set",
            "model.backbone=nope",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "unknown backbone 'nope'" in result.stderr


@pytest.mark.slow
def test_extract_features_then_resume(shapes_dir, tmp_path, capsys):
    argv = [
        "extract-features",
        "--config",
        DEFAULTS,
        "--workdir",
        str(tmp_path),
        "--set",
        "data.dataset=karpathy",
        "--set",
        f"data.path={shapes_dir / 'dataset_shapes.json'}",
        "--set",
        "data.cache_shard_size=32",
        "--set",
        "decode.meteor=false",  # the train run's test scores are not read
    ]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "extract train: 40/40 images (shard 2/2)" in out
    assert "40 train, 8 val, 8 test images, grid (8, 8), 128 channels" in out
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "extract train: cached (40 images)" in out
    # `train` in the same workdir builds the same (seeded) encoder and reuses the cache.
    code, out, _ = run(
        capsys, "train", *argv[1:], "--set", "train.epochs=1", "--set", "train.batch_size=16"
    )
    assert code == 0 and "extract train: cached (40 images)" in out and "epoch 1/1" in out
    assert f"{'XLA' if resolve_jit_compile('auto') else 'no XLA'} (jit_compile: auto)" in out
    # The same command again finds the finished run, whether or not it compiles with XLA
    # (how the step is compiled is not part of the experiment); another config is refused.
    code, out, _ = run(
        capsys,
        "train",
        *argv[1:],
        "--set",
        "train.epochs=1",
        "--set",
        "train.batch_size=16",
        "--set",
        "train.jit_compile=true",
    )
    assert code == 0 and "this run already finished" in out and "epoch 1/1" not in out
    code, _, err = run(
        capsys, "train", *argv[1:], "--set", "train.batch_size=16", "--set", "model.attention=hard"
    )
    assert code == 2 and "holds checkpoints of another config (changed: model.attention)" in err

    # Another workdir trains a second decoder on this one's features: read, never written.
    features = tmp_path / "features"
    before = {p.name: p.stat().st_mtime_ns for p in features.iterdir()}
    other = tmp_path / "hard"
    borrow = [*argv[1:], "--set", f"data.feature_cache={features}", "--set", "train.epochs=1"]
    borrow[borrow.index("--workdir") + 1] = str(other)
    code, out, err = run(
        capsys, "train", *borrow, "--set", "train.batch_size=16", "--set", "model.attention=hard"
    )
    assert code == 0, err
    assert f"feature cache {features} (data.feature_cache: read only)" in out
    assert "extract train: cached (40 images)" in out and "epoch 1/1" in out
    assert not (other / "features").exists()
    assert {p.name: p.stat().st_mtime_ns for p in features.iterdir()} == before
    # A cache this run's extraction would not make, or no cache at all, is named.
    borrow[borrow.index("--workdir") + 1] = str(tmp_path / "pad")
    code, _, err = run(capsys, "train", *borrow, "--set", "data.resize=pad")
    assert (
        code == 2
        and f"data.feature_cache {features} was made with resize crop (this run: pad)" in err
    )
    (tmp_path / "empty").mkdir()
    code, _, err = run(
        capsys, "train", *borrow, "--set", f"data.feature_cache={tmp_path / 'empty'}"
    )
    assert code == 2 and "no feature cache there (no index.json);" in err
    code, _, err = run(capsys, "train", *borrow, "--set", f"data.feature_cache={tmp_path}")
    assert code == 2 and f"(a workdir? its cache is {features})" in err
    # The features a run trains on are part of its experiment: a resume keeps them.
    code, _, err = run(
        capsys, "train", *argv[1:], "--set", "train.batch_size=16",
        "--set", f"data.feature_cache={features}",
    )  # fmt: skip
    assert code == 2 and "(changed: data.feature_cache)" in err
    assert {p.name: p.stat().st_mtime_ns for p in features.iterdir()} == before


@pytest.mark.slow
@TUTORIALS  # the tutorials' model is the demo's: one run, on the tutorials' worker
def test_the_demo_learns_and_its_workdir_evaluates_and_captions(tutorial_runs, tmp_path, capsys):
    """`keras-saat demo`, the README's main job, as a newcomer runs it (the tutorials'
    shared run, `tools/docs.py`'s `train_demo`): it learns, says so, and leaves a workdir
    that the other commands read."""
    workdir = tutorial_runs / DEMO
    out = (tutorial_runs / f"{DEMO}.log").read_text()
    assert "keras-saat demo: Show, Attend and Tell on the Shapes world" in out
    epochs = load_config(recipe_path(DEMO)).train.epochs  # each one logged, the last too
    assert f"epoch {epochs}/{epochs}:" in out and "test scores (beam 3, pycocoevalcap" in out
    shown = out.split("test captions (generated | a reference):\n")[1].splitlines()[:12]
    assert len({line.split(": ", 1)[1] for line in shown[::2]}) >= 4, shown  # not one caption
    for name in ("config.yaml", "vocab.txt", "model.keras", "backbone.weights.h5", "history.json"):
        assert (workdir / name).exists(), name
    record = json.loads((workdir / "backbone.json").read_text())  # what the CNN was made for
    assert record["backbone"] == "shapes_cnn_small_norm" and record["pretraining"]["augment"]
    assert "the Shapes CNN packaged with keras_saat" in out  # no pre-training in the demo
    assert record["packaged"]["made"]["command"].startswith("python tools/package_shapes_cnn.py")
    accuracy = out.split("val accuracy on object locations: ")[1].split("\n")[0]
    assert all(float(v.split()[1]) >= 0.9 for v in accuracy.split(", ")), accuracy
    predictions = json.loads((workdir / "eval" / "test" / "predictions.json").read_text())
    metrics = json.loads((workdir / "eval" / "test" / "metrics.json").read_text())
    assert len(predictions) == 200 and {"image_id", "caption"} == set(predictions[0])
    assert metrics["bleu_4"] >= MIN_BLEU_4["04_decoding_evaluation"] and metrics["images"] == 200
    assert f"BLEU-4 {metrics['bleu_4']:.3f}" in out
    assert metrics["method"].startswith("beam 3, pycocoevalcap") and metrics["beam_size"] == 3
    assert ("meteor" in metrics) == java_available()  # decode.meteor: true by default
    where = metrics["attention_localisation"]
    assert where["hit_rate"] > 3 * where["chance"], where
    assert tf.train.latest_checkpoint(str(workdir / "checkpoints")) is not None
    assert list((workdir / "logs").glob("events.out.tfevents.*"))  # TensorBoard
    model = load_captioner(workdir)
    records = read_karpathy(workdir / "data" / "dataset_shapes.json").split("test")
    assert model.generate(records[0].path, beam_size=3) == [predictions[0]["caption"]]

    # evaluate: another split and beam width, scores on the 0-100 scale, and the demo's
    # captions under shifted photometry beside fresh in-distribution scenes.
    code, out, _ = run(
        capsys, "evaluate", "--workdir", str(workdir), "--split", "val", "--beam-size", "1",
        "--robustness", "64",
    )  # fmt: skip
    assert code == 0 and "val scores (greedy, pycocoevalcap" in out and "CIDEr" in out
    val = json.loads((workdir / "eval" / "val" / "metrics.json").read_text())
    assert val["beam_size"] == 1 and val["images"] == 200 and "attention localisation" in out
    rows = {row["shift"]: row for row in val["robustness"]["rows"]}
    assert len(rows) == len(SHIFTS) and val["robustness"]["scenes"] == 64
    assert "| background 40-100 | background channels from [40, 100] |" in out
    assert rows["in distribution"]["bleu_4"] >= MIN_BLEU_4["04_decoding_evaluation"]
    for name in ("background 40-100", "exposure +40", "colour cast", "JPEG quality 30"):
        assert rows[name]["bleu_4_change"] > -0.1, rows[name]  # the brighter page holds
        assert rows[name]["hit_rate"] > 0.8, rows[name]

    # caption: a bad file is named, the others are captioned and plotted.
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png")
    paths = [str(records[0].path), str(bad), str(records[1].path)]
    code, out, err = run(
        capsys, "caption", "--workdir", str(workdir), *paths, "--plot", str(tmp_path / "att.png")
    )
    assert code == 2 and "broken.png" in err and "1 of 3 images could not be captioned" in err
    assert f"{records[0].path}: {predictions[0]['caption']}" in out
    for record in records[:2]:
        assert (tmp_path / f"att_{record.path.stem}.png").stat().st_size > 1000
