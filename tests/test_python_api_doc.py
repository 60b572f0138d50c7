"""The Python guide's code (docs/guides/python-api.md) runs as written, on a CSV of Shapes
scenes instead of the reader's and a small model on the packaged Shapes CNN instead of
EfficientNet-Lite0: each stand-in replaces a text the guide must still contain, so a change
to the guide's code is a change this test sees."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_saat import load_captioner
from tests.helpers import shapes_caption_csv

GUIDE = Path(__file__).parents[1] / "docs" / "guides" / "python-api.md"


def guide_blocks():
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


def with_stand_ins(code, stand_ins):
    """`code` with each (text, replacement) applied; the text must be there."""
    for text, replacement in stand_ins:
        assert text in code, f"docs/guides/python-api.md no longer says {text!r}: update this test"
        code = code.replace(text, replacement)
    return code


def test_the_guide_has_the_examples_this_test_runs():
    blocks = guide_blocks()
    assert len(blocks) == 4
    assert "read_captions(" in blocks[0] and "model.fit(" in blocks[0]
    assert "keras.saving.load_model(" in blocks[1] and "load_captioner(" in blocks[2]
    assert "caption_batches(" in blocks[3]


def test_captioning_in_python_runs_as_written(small_preset, test_images):
    image = str(test_images[0])
    code = with_stand_ins(
        guide_blocks()[2],
        [
            ('"runs/demo/data/images/002200.png"', repr(image)),
            ('"runs/demo"', repr(str(small_preset))),
        ],
    )
    printed, paths = [], [*map(str, test_images), "no-such-file.png"]
    scope = {"paths": paths, "print": lambda *args: printed.append(args)}
    exec(compile(code, str(GUIDE), "exec"), scope)
    model, details = scope["model"], scope["details"]
    assert details["caption"] == model.generate(image)[0]
    steps, height, width = details["attention"].shape  # a map a word (and <end>'s), a grid's
    assert steps - len(details["words"]) in (0, 1) and height * width > 1
    np.testing.assert_allclose(details["attention"].sum(axis=(1, 2)), 1.0, rtol=1e-4)
    assert [row[0] for row in printed] == paths  # every file answered, in order
    assert "not found" in printed[-1][1]  # the missing file's row: its error, not a caption


@pytest.mark.slow
def test_training_in_python_runs_as_written(shapes_dir, test_images, tmp_path, monkeypatch):
    """The `fit()` example on a CSV of our own (40 Shapes scenes, one epoch), `CaptionMetrics`
    feeding `ModelCheckpoint` and `EarlyStopping`; its reload in a fresh process that
    imports only keras and keras_saat; then the tf.data example on the same model."""
    csv = shapes_caption_csv(shapes_dir, tmp_path / "own")
    small = (
        'backbone="shapes_cnn_small_norm", backbone_weights="shapes", feature_dim=16, '
        "embedding_dim=8, lstm_units=16, attention_units=8, max_length=8, seed=0"
    )
    fit, reload, _, under_the_hood = guide_blocks()
    fit = with_stand_ins(
        fit,
        [
            ('"captions.csv"', repr(str(csv))),
            ('backbone="efficientnet_lite0", backbone_weights="imagenet"', small),
            ("epochs=10", "epochs=1"),
        ],
    )
    monkeypatch.chdir(tmp_path)  # its best.keras
    scope = {}
    exec(compile(fit, str(GUIDE), "exec"), scope)
    history = scope["model"].history.history
    assert {"loss", "nll", "val_loss", "val_bleu4", "val_cider"} <= set(history), sorted(history)
    assert len(history["loss"]) == 1 and np.isfinite(history["loss"][0])
    assert 0 <= history["val_bleu4"][0] <= 1  # one scale: 0-1

    reload = with_stand_ins(reload, [('"my_photo.jpg"', repr(str(test_images[0])))])
    done = subprocess.run(
        [sys.executable, "-c", reload + "\nprint(repr(model.generate(" + repr(str(test_images[0])) + ")))"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == repr(
        load_captioner(tmp_path / "best.keras").generate(str(test_images[0]))
    )

    under_the_hood = with_stand_ins(under_the_hood, [("epochs=10", "epochs=1")])
    exec(compile(under_the_hood, str(GUIDE), "exec"), scope)
    assert scope["steps_per_epoch"] == sum(len(r.captions) for r in scope["data"].train) // 64
    assert len(scope["model"].history.history["loss"]) == 1
