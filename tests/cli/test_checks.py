"""The command line answers a mistake before TensorFlow loads, with one line; --version,
--verbose and each command's Examples section."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import keras_saat
from keras_saat.cli import build_parser
from keras_saat.cli.caption import plot_names
from keras_saat.cli.flags import split_beam_args
from keras_saat.config import ExperimentConfig, save_config
from tests.helpers import DEFAULTS

# The checkout whose keras_saat the child process imports: the one under test.
ROOT = Path(keras_saat.__file__).parents[1]
HEAVY = {"tensorflow", "keras", "tf_keras", "jax", "torch"}


def run_cli(*argv):
    """`python -X importtime -m keras_saat.cli ARGV`: (exit code, stdout, stderr's lines
    that are not import times, the top-level packages imported)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "keras_saat.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    lines = result.stderr.splitlines()
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in lines
        if line.startswith("import time:") and "|" in line
    }
    messages = [line for line in lines if not line.startswith("import time:")]
    return result.returncode, result.stdout, messages, imported


@pytest.fixture(scope="module")
def fake_workdir(tmp_path_factory):
    """A workdir as the checks see it: config.yaml and model.keras (its bytes unread)."""
    path = tmp_path_factory.mktemp("workdir")
    save_config(ExperimentConfig(), path / "config.yaml")
    (path / "model.keras").write_bytes(b"")
    return path


def mistakes(tmp):
    """(argv, the error message's text) for each mistake a newcomer makes."""
    train = ["train", "--config", DEFAULTS, "--workdir", tmp / "w"]
    return [
        (["train", "--config", "shapes_sof", "--workdir", tmp / "w"],
         "no recipe 'shapes_sof' (did you mean \"shapes_soft\"?)"),
        ([*train, "--set", "train.epoch=3"],
         "unknown config key 'train.epoch' (did you mean \"epochs\"?)"),
        ([*train, "--set", "train.epochs=ten"], "train.epochs: 'ten' is not a valid int"),
        ([*train, "--set", "model.attention=sfot"], "'sfot' is not one of soft, hard"),
        ([*train, "--set", "model.backbone=vgg17"], "unknown backbone 'vgg17'"),
        ([*train, "--set", "data.dataset=karpathi"], "data.dataset: 'karpathi' is not one of"),
        ([*train, "--set", "data.dataset=karpathy", "--set", f"data.path={tmp}/none.json"],
         f"dataset file not found: {tmp}/none.json (data.path)"),
        ([*train, "--set", "data.dataset=karpathy"], "data.path must name the dataset file"),
        ([*train, "--set", "data.dataset=karpathy", "--set", f"data.path={DEFAULTS}",
          "--set", f"data.images_dir={tmp}/none"], f"image folder not found: {tmp}/none"),
        ([*train, "--set", f"model.backbone_weights={tmp}/none.h5"],
         "backbone weights file not found"),
        (["train", "--config", tmp / "none.yaml", "--workdir", tmp / "w"],
         "config file not found"),
        (["demo", "--set", "train.batch_sise=8"], "unknown config key 'train.batch_sise'"),
        (["caption", "--workdir", tmp / "nowhere", "a.png"],
         f"--workdir {tmp}/nowhere: no such file or folder; give a trained workdir, a .keras "
         "file or a preset folder"),
        (["caption", "--preset", tmp, "a.png"],
         f"--preset {tmp} is neither a workdir (no config.yaml) nor a preset folder"),
        (["caption", "--workdir", "{workdir}", "a.png", "--max-pixels", "0"],
         "config export.max_pixels: 0 is out of range; give an integer from 1 to 1000000000"),
        (["train", "--workdir", tmp],
         f"--workdir {tmp} holds no config.yaml to resume; give --config"),
        (["caption", "--workdir", "{workdir}", tmp / "missing.png"],
         f"{tmp}/missing.png: no such file"),
        (["caption", "--workdir", "{workdir}", tmp, "--out", tmp / "rows.txt"],
         ".jsonl (JSON lines) or .csv"),
        (["caption", "--workdir", "{workdir}", f"{tmp}/*.gif"], "holds no image files"),
        (["export", "--workdir", "{workdir}", "--out", tmp / "e", "--format", "savedmodl"],
         "'savedmodl' is not one of savedmodel, preset, litert"),
        (["evaluate", "--workdir", "{workdir}", "--set", "decode.beam_sise=2"],
         "unknown config key 'decode.beam_sise'"),
        (["evaluate", "--workdir", tmp], "neither a workdir (no config.yaml) nor a preset"),
        (["serve", "--model-base", tmp / "none"], "no such folder"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(len(mistakes(Path("/t")))))
def test_a_mistake_is_one_line_before_tensorflow_loads(case, tmp_path, fake_workdir):
    argv, message = mistakes(tmp_path)[case]
    argv = [str(fake_workdir) if a == "{workdir}" else a for a in argv]
    code, out, errors, imported = run_cli(*argv)
    assert code == 2 and out == ""
    assert errors == [errors[0]] and errors[0].startswith("keras-saat: error: "), errors
    assert message in errors[0]
    assert not imported & HEAVY, sorted(imported & HEAVY)


def test_a_keras_file_is_a_trained_model_and_other_files_are_not(tmp_path):
    """`--workdir` takes a `.keras` file (what ModelCheckpoint writes) before TensorFlow
    loads; a file of another kind is named with what to give, and `evaluate`, which a
    model file tells no dataset, asks for one."""
    (tmp_path / "best.keras").write_bytes(b"")  # never read by the checks
    (tmp_path / "model.h5").write_bytes(b"")
    cases = [
        (["caption", "--workdir", tmp_path / "model.h5", "a.png"],
         f"--workdir {tmp_path}/model.h5 is a file but not a .keras file"),
        (["caption", "--workdir", tmp_path / "best.keras", tmp_path / "none.png"],
         f"{tmp_path}/none.png: no such file"),  # the model passed: the images are next
        (["evaluate", "--workdir", tmp_path / "best.keras"],
         f"--workdir {tmp_path}/best.keras: a .keras model carries no dataset; name one with "
         "--set data.dataset=... --set data.path=..."),
        (["export", "--preset", tmp_path / "best.keras", "--out", tmp_path / "e",
          "--set", "decode.beam_sise=2"], "unknown config key 'decode.beam_sise'"),
    ]  # fmt: skip
    for argv, message in cases:
        code, out, errors, imported = run_cli(*argv)
        assert code == 2 and out == "" and len(errors) == 1, errors
        assert message in errors[0], errors[0]
        assert not imported & HEAVY, sorted(imported & HEAVY)


def test_the_checks_leave_the_classified_model_path_for_the_run(tmp_path, fake_workdir):
    from keras_saat.cli import caption
    from keras_saat.models.trained_model_path import KERAS_FILE, WORKDIR

    image = tmp_path / "a.png"
    image.write_bytes(b"")
    (tmp_path / "best.keras").write_bytes(b"")
    for path, kind in ((tmp_path / "best.keras", KERAS_FILE), (fake_workdir, WORKDIR)):
        args = build_parser().parse_args(["caption", "--workdir", str(path), str(image)])
        caption.check(args)
        assert (args.trained.path, args.trained.kind) == (path, kind)


def test_train_without_a_config_resumes_the_workdir_with_its_own(tmp_path):
    import dataclasses

    from keras_saat.cli import train
    from keras_saat.config import load_config

    config = ExperimentConfig()
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, epochs=7))
    save_config(config, tmp_path / "config.yaml")
    argv = ["train", "--workdir", str(tmp_path), "--set", "train.epochs=9"]
    args = build_parser().parse_args(argv)
    train.check(args)
    assert args.config == str(tmp_path / "config.yaml")
    assert args.experiment == load_config(tmp_path / "config.yaml", ["train.epochs=9"])
    assert args.experiment.train.epochs == 9


def test_a_workdir_without_a_model_is_named(tmp_path):
    save_config(ExperimentConfig(), tmp_path / "config.yaml")
    code, _, errors, imported = run_cli("evaluate", "--workdir", tmp_path)
    assert code == 2 and "has no model.keras" in errors[0] and len(errors) == 1
    assert not imported & HEAVY


def test_version_without_tensorflow():
    from importlib import metadata

    code, out, errors, imported = run_cli("--version")
    assert code == 0 and out == f"keras-saat {metadata.version('keras-saat')}\n"
    assert errors == [] and not imported & HEAVY


def test_verbose_before_or_after_the_command():
    parser = build_parser()
    argv = ["train", "--config", "shapes_soft", "--workdir", "w"]
    assert parser.parse_args(argv).verbose is False
    assert parser.parse_args(["--verbose", *argv]).verbose is True
    assert parser.parse_args([*argv, "--verbose"]).verbose is True


def test_every_command_has_examples_that_parse():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        text = command.format_help()
        assert "examples:" in text, name
        examples = [line.strip() for line in command.epilog.splitlines()[1:]]
        assert examples and all(f"{e} ".startswith(f"keras-saat {name} ") for e in examples), name
        for example in examples:
            argv, _ = split_beam_args(shlex.split(example)[1:])  # as `main` splits them
            args = parser.parse_args(argv)
            assert args.command == name
    assert "examples:" in parser.format_help()


def test_plot_names_follow_the_inputs_and_are_unique():
    paths = [Path("a/x.png"), Path("b/x.jpg"), Path("c/x_2.png"), Path("y.bmp")]
    names = plot_names("out/att.png", paths)
    assert [names[str(p)].name for p in paths] == [
        "att_x.png",
        "att_x_2.png",
        "att_x_2_2.png",
        "att_y.png",
    ]
    assert {n.parent for n in names.values()} == {Path("out")}
    assert plot_names("out/att.png", paths[:1]) == {"a/x.png": Path("out/att.png")}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["trian"], "invalid choice: 'trian'"),
        (["--verbose", "captoin", "a.png"], "invalid choice: 'captoin'"),
        (["evaluate", "--workdir", "w", "--split", "tset"], "invalid choice: 'tset'"),
        (["caption", "--workdir", "w", "--beam-sise", "2", "a.png"],
         "unrecognized arguments: --beam-sise"),
        (["caption", "--workdir", "w", "--beam-sise=2", "a.png"],
         "unrecognized arguments: --beam-sise=2"),
        (["train", "--config", "c", "--wrkdir", "w"],
         "the following arguments are required: --workdir"),
    ],
)  # fmt: skip
def test_a_mistyped_name_is_answered_with_the_closest(argv, message):
    hints = {
        "trian": '(did you mean "train"?)',
        "captoin": '(did you mean "caption"?)',
        "tset": '(did you mean "test"?)',
        "--beam-sise": '(did you mean "--beam-size"?)',
        "--beam-sise=2": '(did you mean "--beam-size"?)',
        "--wrkdir": '(did you mean "--workdir" for --wrkdir?)',  # not named by the message
    }
    code, out, errors, imported = run_cli(*argv)
    assert code == 2 and out == "" and errors[0].startswith("usage: keras-saat")
    assert message in errors[-1], errors[-1]
    assert errors[-1].endswith(next(hints[a] for a in argv if a in hints)), errors[-1]
    assert not imported & HEAVY, sorted(imported & HEAVY)


def test_no_hint_where_no_name_is_close():
    for argv in (["xyz"], ["train", "--config", "c", "--workdir", "w", "--zzzz"]):
        code, _, errors, _ = run_cli(*argv)
        assert code == 2 and "did you mean" not in errors[-1], errors[-1]


def test_a_missing_image_among_others_is_left_to_the_run(fake_workdir, tmp_path, capsys):
    """The check names nothing: the run reports the missing file once, as its error row
    (test_caption.py); a mistake where no image exists is the check's (`mistakes`)."""
    from keras_saat.cli import caption

    image = tmp_path / "a.png"
    image.write_bytes(b"")
    argv = ["caption", "--workdir", str(fake_workdir), str(image), str(tmp_path / "none.png")]
    args = build_parser().parse_args(argv)
    caption.check(args)
    assert args.paths == [image, tmp_path / "none.png"]
    assert capsys.readouterr().err == ""
