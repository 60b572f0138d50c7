"""The command line: user errors end with one clear message, and the demo runs end to end."""

import json
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_saat import load_captioner
from keras_saat.cli import main
from keras_saat.data import read_karpathy
from keras_saat.training.trainer import resolve_jit_compile
from tests.helpers import DEFAULTS


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
            "(shapes_cnn or shapes_cnn_small); got vgg16",
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
    """No silent training on the defaults' random, frozen backbone: --config is required."""
    with pytest.raises(SystemExit) as exited:
        main(["train", "--workdir", str(tmp_path)])
    assert exited.value.code == 2
    assert "the following arguments are required: --config" in capsys.readouterr().err


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


@pytest.mark.slow
def test_demo_runs_end_to_end_on_small_settings(tmp_path, capsys):
    workdir = tmp_path / "demo"
    small = [
        "data.shapes_train=64",
        "data.shapes_val=8",
        "data.shapes_test=8",
        "train.epochs=2",
        "train.backbone_pretrain_epochs=1",
        "train.backbone_pretrain_scenes=64",
        "train.batch_size=32",
    ]
    argv = ["demo", "--workdir", str(workdir), "--show", "2"]
    for setting in small:
        argv += ["--set", setting]
    code, out, _ = run(capsys, *argv)
    assert code == 0, out
    assert "epoch 2/2" in out and "test scores x100 (beam 3, pycocoevalcap" in out
    assert "BLEU-4" in out and "CIDEr" in out
    for name in ("config.yaml", "vocab.txt", "model.keras", "backbone.weights.h5", "history.json"):
        assert (workdir / name).exists(), name
    predictions = json.loads((workdir / "eval" / "test" / "predictions.json").read_text())
    metrics = json.loads((workdir / "eval" / "test" / "metrics.json").read_text())
    assert len(predictions) == 8 and {"image_id", "caption"} == set(predictions[0])
    assert 0.0 <= metrics["bleu_4"] <= 1.0 and metrics["images"] == 8
    assert metrics["method"].startswith("beam 3, pycocoevalcap") and metrics["beam_size"] == 3
    where = metrics["attention_localisation"]  # a 2-epoch model may name no object right
    if where["words"]:
        assert 0.0 <= where["chance"] <= 1.0 and 0.0 <= where["hit_rate"] <= 1.0
    else:
        assert where["hit_rate"] is None and where["chance"] is None
    assert tf.train.latest_checkpoint(str(workdir / "checkpoints")) is not None
    assert list((workdir / "logs").glob("events.out.tfevents.*"))  # TensorBoard
    model = load_captioner(workdir)
    records = read_karpathy(workdir / "data" / "dataset_shapes.json").split("test")
    assert model.generate(records[0].path, beam_size=3) == [predictions[0]["caption"]]

    # evaluate: another split and beam width, scores on the 0-100 scale.
    code, out, _ = run(
        capsys, "evaluate", "--workdir", str(workdir), "--split", "val", "--beam-size", "1"
    )
    assert code == 0 and "val scores x100 (greedy, pycocoevalcap" in out and "CIDEr" in out
    val = json.loads((workdir / "eval" / "val" / "metrics.json").read_text())
    assert val["beam_size"] == 1 and val["images"] == 8
    assert "attention localisation" in out or val["attention_localisation"]["words"] == 0

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
