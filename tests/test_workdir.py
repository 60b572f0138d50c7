"""What a workdir guarantees: one writer at a time, whole files after a kill, no stale data."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from keras_saat.cli import main
from keras_saat.config import DataConfig, load_config
from keras_saat.data.feature_cache.cache_format import dataset_fingerprint, shard_inputs
from keras_saat.data.readers.caption_table import read_caption_table
from keras_saat.data.readers.karpathy import read_karpathy
from keras_saat.data.readers.reader_registry import get_reader
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.preparation import check_pretrained_for
from keras_saat.workdir import (
    BACKBONE_RECORD_FILE,
    BACKBONE_WEIGHTS_FILE,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    MODEL_FILE,
    workdir_lock,
)
from tests.helpers import DEFAULTS, ROOT


def test_a_second_run_on_a_busy_workdir_is_refused(tmp_path, capsys):
    workdir = tmp_path / "run"
    workdir.mkdir()
    with workdir_lock(workdir, "train"):
        code = main(["train", "--config", DEFAULTS, "--workdir", str(workdir)])
        err = capsys.readouterr().err
        assert code == 2 and "is in use: `keras-saat train`, process" in err
        assert "another --workdir" in err
        assert main(["extract-features", "--config", DEFAULTS, "--workdir", str(workdir)]) == 2
    with workdir_lock(workdir, "train"):  # released: taken again
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from keras_saat.workdir import workdir_lock\n"
         "with workdir_lock(sys.argv[1], 'train'):\n    print('held', flush=True); time.sleep(60)",
         str(workdir)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(KerasSaatError, match=f"process {holder.pid}"):
            with workdir_lock(workdir, "train"):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    with workdir_lock(workdir, "train"):
        pass


KILLED_WRITER = textwrap.dedent(
    """
    import dataclasses, sys
    from keras_saat.config import ExperimentConfig, save_config
    config = ExperimentConfig()
    print("writing", flush=True)
    i = 0
    while True:
        i += 1
        model = dataclasses.replace(config.model, seed=i)
        save_config(dataclasses.replace(config, model=model), sys.argv[1])
    """
)


def test_a_kill_while_writing_the_config_leaves_a_whole_file(tmp_path):
    path = tmp_path / CONFIG_FILE
    for delay in (0.05, 0.2, 0.35):
        writer = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, cwd=ROOT
        )
        writer.stdout.readline()
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        assert load_config(str(path)).model.seed >= 1  # parses, every field there


def shapes_data(path="", seed=0, varied=0.0):
    return DataConfig(
        dataset="shapes", path=path, shapes_train=6, shapes_val=2, shapes_test=2, shapes_seed=seed,
        shapes_varied=varied,
    )  # fmt: skip


def test_a_workdirs_shapes_world_is_made_anew_for_other_settings_by_training_only(tmp_path):
    read = get_reader("shapes")
    lines = []
    first = read(shapes_data(seed=0), tmp_path, lines.append)
    image = first.split("train")[0].path
    before, inputs = image.read_bytes(), shard_inputs(first.split("train"))
    (tmp_path / BACKBONE_WEIGHTS_FILE).write_bytes(b"a CNN pre-trained on the seed-0 world")
    (tmp_path / BACKBONE_RECORD_FILE).write_text('{"backbone": "shapes_cnn"}')
    again = read(shapes_data(seed=0), tmp_path, lines.append)
    assert again.counts() == first.counts() and image.read_bytes() == before  # reused as is
    # Scoring never redraws a folder's world nor deletes its CNN; training does.
    with pytest.raises(KerasSaatError, match=r"scoring never redraws a folder's world: give --out"):
        read(shapes_data(seed=1), tmp_path, lines.append)
    assert image.read_bytes() == before and (tmp_path / BACKBONE_WEIGHTS_FILE).exists()
    other = read(shapes_data(seed=1), tmp_path, lines.append, redraw=True)
    assert image.read_bytes() != before and other.counts() == first.counts()
    assert not (tmp_path / BACKBONE_WEIGHTS_FILE).exists()
    assert not (tmp_path / BACKBONE_RECORD_FILE).exists()
    assert any("is 6/2/2 images, seed 0; generating 6/2/2 images, seed 1" in line for line in lines)
    assert shard_inputs(other.split("train")) != inputs  # its cache's shards are not reused


def test_a_varied_world_drawn_under_other_pages_or_light_is_made_anew(tmp_path):
    """The varied scenes' pages and light are part of the world's settings: a file whose
    record lacks them (or has others) is regenerated, and the log says how they differ."""
    import json

    read = get_reader("shapes")
    lines = []
    read(shapes_data(varied=0.5), tmp_path, lines.append)
    path = tmp_path / "data" / "dataset_shapes.json"
    stored = json.loads(path.read_text())
    for key in ("varied_pages", "varied_light"):
        del stored["generator"][key]
    path.write_text(json.dumps(stored))
    (tmp_path / BACKBONE_WEIGHTS_FILE).write_bytes(b"a CNN pre-trained on the other pages")
    read(shapes_data(varied=0.5), tmp_path, lines.append, redraw=True)
    assert "varied_pages" in json.loads(path.read_text())["generator"]
    assert not (tmp_path / BACKBONE_WEIGHTS_FILE).exists()
    told = next(line for line in lines if "; generating" in line)
    assert "(pages and light not recorded); generating" in told
    assert "(pages 0-255; light falling off by up to 0.35)" in told


@pytest.mark.parametrize("trained", [MODEL_FILE, CHECKPOINT_DIR])
def test_a_trained_workdirs_world_is_kept_and_another_is_refused(tmp_path, trained):
    """Once a model learned from the workdir's world, neither `evaluate` nor a resumed
    `train` regenerates it or deletes its CNN: a world drawn by another version (no
    setting changes that) is read as it is, with a note; other counts or seed are refused."""
    read = get_reader("shapes")
    lines = []
    first = read(shapes_data(varied=0.5), tmp_path, lines.append)
    path = tmp_path / "data" / "dataset_shapes.json"
    stored = json.loads(path.read_text())
    stored["generator"]["varied_light"] = 0.1  # drawn by another version
    path.write_text(json.dumps(stored))
    images = {r.path: r.path.read_bytes() for r in first.records}
    (tmp_path / BACKBONE_WEIGHTS_FILE).write_bytes(b"the CNN the model's features came from")
    if trained == CHECKPOINT_DIR:
        (tmp_path / trained).mkdir()
    else:
        (tmp_path / trained).write_bytes(b"a trained model")
    again = read(shapes_data(varied=0.5), tmp_path, lines.append)
    assert [r.path for r in again.records] == [r.path for r in first.records]
    assert json.loads(path.read_text()) == stored  # the file as it was
    note = next(line for line in lines if line.startswith("note: the Shapes world"))
    assert "light falling off by up to 0.1)" in note
    assert f"since {tmp_path / trained} was trained on it" in note
    with pytest.raises(KerasSaatError, match="that .* was trained on, and the config asks") as err:
        read(shapes_data(seed=4, varied=0.5), tmp_path, lines.append)
    for way in ("--out at a folder", "use a new --workdir", "move model.keras and checkpoints/"):
        assert way in str(err.value)
    assert json.loads(path.read_text()) == stored
    assert {p: p.read_bytes() for p in images} == images  # no image redrawn
    kept = (tmp_path / BACKBONE_WEIGHTS_FILE).read_bytes()
    assert kept == b"the CNN the model's features came from"
    # The same world named by data.path: refused to a workdir with nothing trained (a new
    # run should train on a world drawn anew), read as it is by a trained one.
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(KerasSaatError, match="which no setting changes: move it away"):
        read(shapes_data(path=str(path), varied=0.5), other, lines.append)
    (other / MODEL_FILE).write_bytes(b"another trained model")
    lines.clear()
    named = read(shapes_data(path=str(path), varied=0.5), other, lines.append)
    assert len(named.records) == len(first.records) and json.loads(path.read_text()) == stored
    assert lines[0].startswith("note: the Shapes world")


def test_a_refused_train_leaves_the_trained_workdirs_config_as_it_was(tmp_path, capsys):
    """`train` with another world's settings in a workdir whose model learned from its
    own (checkpoints moved away, model.keras kept) is refused before config.yaml is
    rewritten, so `evaluate` still reads the config the model was trained with."""
    workdir = tmp_path / "run"
    small = ["data.dataset=shapes", "data.shapes_train=6", "data.shapes_val=2",
             "data.shapes_test=2", "train.epochs=1"]  # fmt: skip
    config = load_config(DEFAULTS, small)
    workdir.mkdir()
    get_reader("shapes")(config.data, workdir, lambda _: None)
    from keras_saat.config import save_config

    save_config(config, workdir / CONFIG_FILE)
    before = (workdir / CONFIG_FILE).read_bytes()
    (workdir / MODEL_FILE).write_bytes(b"a trained model")
    argv = ["train", "--config", DEFAULTS, "--workdir", str(workdir)]
    for setting in [*small, "data.shapes_seed=4"]:
        argv += ["--set", setting]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "that " + str(workdir / MODEL_FILE) + " was trained on" in err
    assert (workdir / CONFIG_FILE).read_bytes() == before


@pytest.mark.slow
def test_evaluate_on_other_data_writes_only_where_out_says(trained_workdir, tmp_path, capsys):
    """`evaluate --set data.path=...` scores the model on another dataset: it asks for
    --out, encodes the images as it reads them, and leaves the workdir's own scores and
    feature cache as they were."""
    from keras_saat.data.shapes_dataset import write_shapes_dataset

    other = tmp_path / "other"
    write_shapes_dataset(other, train=2, val=2, test=3, seed=11)

    def files():
        found = [p for d in ("eval", "features") for p in (trained_workdir / d).rglob("*")]
        return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in found if p.is_file()}

    before = files()
    argv = ["evaluate", "--workdir", str(trained_workdir), "--beam-size", "1",
            "--set", f"data.path={other / 'dataset_shapes.json'}"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--set data.path scores the model on other data" in err and "--out DIR" in err
    assert main([*argv, "--out", str(tmp_path / "scores")]) == 0
    metrics = json.loads((tmp_path / "scores" / "metrics.json").read_text())
    assert metrics["images"] == 3
    assert files() == before


@pytest.mark.parametrize(
    "record, backbone, refused",
    [
        ('{"backbone": "shapes_cnn_small_norm"}', "shapes_cnn_small_norm", None),
        ('{"backbone": "shapes_cnn_small"}', "shapes_cnn_small_norm", "pre-trained for shapes_cnn_small,"),
        ('{"backbone": "shapes_cnn_small_norm"}', "shapes_cnn_small", "pre-trained for shapes_cnn_small_norm"),
        (None, "shapes_cnn_small", None),  # written before the records: an unstandardised CNN's
        (None, "shapes_cnn_small_norm", "without the standardising stem"),
        ("{not json", "shapes_cnn", "does not say which Shapes CNN"),
    ],
)  # fmt: skip
def test_pre_trained_weights_of_another_shapes_cnn_are_refused(tmp_path, record, backbone, refused):
    """The `_norm` variants have the others' weights: a file of one would load into the
    other and give other features, so its record (backbone.json) must name the variant."""
    weights = tmp_path / BACKBONE_WEIGHTS_FILE
    weights.write_bytes(b"a pre-trained CNN")
    if record is not None:
        (tmp_path / BACKBONE_RECORD_FILE).write_text(record)
    if refused is None:
        check_pretrained_for(backbone, weights)
        return
    with pytest.raises(KerasSaatError, match=refused) as caught:
        check_pretrained_for(backbone, weights)
    assert "Move it away" in str(caught.value) or "move both away" in str(caught.value)
    assert weights.read_bytes() == b"a pre-trained CNN"  # nothing lost


def test_a_cnn_pre_trained_under_other_settings_is_kept_and_named(tmp_path):
    """backbone.json records how the CNN was pre-trained; a config that asks for another
    pre-training keeps the CNN (a trained decoder's features come from it) and says so."""
    from keras_saat.config import TrainConfig
    from keras_saat.experiment.preparation import pretraining_difference, pretraining_record

    weights = tmp_path / BACKBONE_WEIGHTS_FILE
    weights.write_bytes(b"a pre-trained CNN")
    record = tmp_path / BACKBONE_RECORD_FILE
    train = TrainConfig(backbone_pretrain_scenes=4000)
    record.write_text(
        json.dumps({"backbone": "shapes_cnn", "pretraining": pretraining_record(train)})
    )
    assert pretraining_difference(train, weights) is None
    assert pretraining_difference(TrainConfig(backbone_pretrain_scenes=4000), weights) is None
    other = pretraining_difference(TrainConfig(backbone_pretrain_augment=False), weights)
    assert '"augment": true' in other and '"augment": false' in other
    assert "move it away (with backbone.json) to pre-train anew" in other
    record.write_text(json.dumps({"backbone": "shapes_cnn"}))  # recorded no pre-training
    assert "pre-trained with settings not recorded" in pretraining_difference(train, weights)
    assert weights.read_bytes() == b"a pre-trained CNN"  # kept


def test_a_named_shapes_file_of_other_settings_is_refused(tmp_path):
    read = get_reader("shapes")
    path = tmp_path / "world" / "dataset_shapes.json"
    read(shapes_data(path=str(path)), tmp_path, lambda _: None)
    with pytest.raises(KerasSaatError, match="holds a Shapes world of 6/2/2 images, seed 0"):
        read(shapes_data(path=str(path), seed=3), tmp_path, lambda _: None)
    with pytest.raises(
        KerasSaatError, match=r"asks for 6/2/2 images, seed 0, 0\.5 of the training"
    ):
        read(shapes_data(path=str(path), varied=0.5), tmp_path, lambda _: None)
    # A varied file drawn under other pages or light: no setting matches it, and the error
    # says so rather than pointing at the settings.
    varied = tmp_path / "varied" / "dataset_shapes.json"
    read(shapes_data(path=str(varied), varied=0.5), tmp_path, lambda _: None)
    stored = json.loads(varied.read_text())
    stored["generator"]["varied_light"] = 0.1
    varied.write_text(json.dumps(stored))
    with pytest.raises(KerasSaatError, match="which no setting changes: move it away") as caught:
        read(shapes_data(path=str(varied), varied=0.5), tmp_path, lambda _: None)
    assert "light falling off by up to 0.1), but" in str(caught.value)
    assert "data.shapes_train/val/test/seed/varied to match" not in str(caught.value)


def test_the_cache_fingerprint_sees_a_replaced_image(shapes_dir, tmp_path):
    import shutil

    copy = tmp_path / "shapes"
    shutil.copytree(shapes_dir, copy)
    dataset = read_karpathy(copy / "dataset_shapes.json")
    records = dataset.split("train")
    before, others = shard_inputs(records[:16]), shard_inputs(records[16:])
    shutil.copy(records[1].path, records[0].path)  # same name, other pixels
    again = read_karpathy(copy / "dataset_shapes.json")
    assert dataset_fingerprint(again) == dataset_fingerprint(dataset)  # the same images, named
    assert shard_inputs(again.split("train")[:16]) != before  # its shard is extracted again
    assert shard_inputs(again.split("train")[16:]) == others  # the others are kept


def test_a_captions_file_stamps_each_image_once_for_the_cache(tmp_path):
    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / "b.png").write_bytes(b"yy")
    (tmp_path / "c.png").mkdir()  # not a file: skipped as such
    path = tmp_path / "captions.csv"
    path.write_text("image,caption,split\na.png,a cat,train\nb.png,a dog,train\nc.png,a,train\n")
    dataset = read_caption_table(path)
    assert [r.name for r in dataset.records] == ["a.png", "b.png"]
    assert dataset.skips.summary() == [f"skipped 1 x not a regular file (first: {path}:4: "
                                       f"{tmp_path / 'c.png'})"]  # fmt: skip
    stamps = [r.stamp for r in dataset.records]
    assert stamps[0].startswith("1|") and stamps[1].startswith("2|")
    inputs = shard_inputs(dataset.records)
    for record in dataset.records:
        record.path.unlink()  # the cache fingerprints with the reader's stamps, not a stat
    assert shard_inputs(dataset.records) == inputs


@pytest.mark.slow
def test_only_training_commands_tune_malloc(tmp_path):
    child = (
        "import sys; from keras_saat.cli import main; from keras_saat.runtime.memory import malloc_tuned\n"
        "main(sys.argv[1:]); print('TUNED', malloc_tuned())"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "KERAS_SAAT"))}
    cases = {
        ("caption", "--workdir", str(tmp_path), str(tmp_path / "x.png")): "False",
        ("serve", "--model-base", str(tmp_path / "none")): "False",
        ("train", "--config", str(tmp_path / "missing.yaml"), "--workdir", str(tmp_path)): "True",
    }
    for argv, expected in cases.items():
        result = subprocess.run(
            [sys.executable, "-c", child, *argv], capture_output=True, text=True, env=env,
            cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert f"TUNED {expected}" in result.stdout, (argv, result.stdout, result.stderr[-1000:])


def test_a_planted_link_in_the_workdir_redirects_no_write(tmp_path):
    """A writable workdir with links under the names a run writes: the lock and every
    temporary refuse or replace the link, and the link's target keeps its bytes."""
    from keras_saat.config import ExperimentConfig, save_config

    workdir = tmp_path / "run"
    workdir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (workdir / "train.lock").symlink_to(victim)
    with pytest.raises(KerasSaatError, match="train.lock cannot be opened as the workdir's lock"):
        with workdir_lock(workdir, "train"):
            pass
    (workdir / "train.lock").unlink()
    os.link(victim, workdir / "train.lock")  # a hard link: the victim's own inode
    with pytest.raises(KerasSaatError, match="train.lock is not a plain file of its own"):
        with workdir_lock(workdir, "train"):
            pass
    (workdir / "train.lock").unlink()
    os.mkfifo(workdir / "train.lock")
    with pytest.raises(KerasSaatError, match="train.lock is not a plain file"):
        with workdir_lock(workdir, "train"):
            pass
    (workdir / "train.lock").unlink()
    # The names the old writers used for their temporaries, and the file itself.
    for name in (".config.yaml.tmp", ".config.yaml.tmp.tmp", CONFIG_FILE):
        (workdir / name).symlink_to(victim)
    save_config(ExperimentConfig(), workdir / CONFIG_FILE)
    assert victim.read_text() == "precious\n"
    assert not (workdir / CONFIG_FILE).is_symlink()
    assert load_config(workdir / CONFIG_FILE) == ExperimentConfig()
    assert sorted(p.name for p in workdir.iterdir()) == sorted(
        [".config.yaml.tmp", ".config.yaml.tmp.tmp", CONFIG_FILE]
    )
