"""The Python guide's code (docs/guides/python-api.md) runs as written, on the Shapes world
instead of Flickr8k and a small model instead of VGG16: each stand-in replaces a text the
guide must still contain, so a change to the guide's code is a change this test sees."""

import re
from pathlib import Path

import numpy as np
import pytest

from keras_saat import load_captioner

GUIDE = Path(__file__).parents[1] / "docs" / "guides" / "python-api.md"


def guide_blocks():
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


def with_stand_ins(code, stand_ins):
    """`code` with each (text, replacement) applied; the text must be there."""
    for text, replacement in stand_ins:
        assert text in code, f"docs/guides/python-api.md no longer says {text!r}: update this test"
        code = code.replace(text, replacement)
    return code


def test_the_guide_has_the_two_examples_this_test_runs():
    blocks = guide_blocks()
    assert len(blocks) == 2
    assert "load_captioner(" in blocks[0] and "model.fit(" in blocks[1]


def test_captioning_in_python_runs_as_written(small_preset, test_images):
    image = str(test_images[0])
    code = with_stand_ins(
        guide_blocks()[0],
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
def test_training_in_python_runs_as_written(shapes_dir, tmp_path, monkeypatch):
    """The `fit()` example: its imports, its pipeline, `CaptionMetrics` feeding
    `ModelCheckpoint` and `EarlyStopping`, one epoch on 40 Shapes scenes."""
    code = with_stand_ins(
        guide_blocks()[1],
        [
            # Process-wide allocator settings: tests/runtime/test_memory.py calls it in a
            # process of its own; here it would change the rest of the worker's run.
            ("keras_saat.tune_malloc()", "keras_saat.tune_malloc"),
            (
                'read_karpathy("dataset_flickr8k.json", images_dir="Flicker8k_Dataset")',
                f"read_karpathy({str(shapes_dir / 'dataset_shapes.json')!r})",
            ),
            (
                'backbone="vgg16", backbone_weights="imagenet"',
                'backbone="shapes_cnn_small", feature_dim=16, embedding_dim=8, lstm_units=16, '
                "attention_units=8, max_length=8, seed=0",
            ),
            ("ImageFiles(image_size=224)", "ImageFiles(image_size=128)"),
            ("epochs=10", "epochs=1"),
        ],
    )
    monkeypatch.chdir(tmp_path)  # its logs/ and best.keras
    scope = {}
    exec(compile(code, str(GUIDE), "exec"), scope)
    history = scope["model"].history.history
    assert {"loss", "nll", "val_bleu4", "val_cider"} <= set(history), sorted(history)
    assert len(history["loss"]) == 1 and np.isfinite(history["loss"][0])
    best = load_captioner(tmp_path / "best.keras")  # ModelCheckpoint on val_bleu4
    assert best.vocabulary.words == scope["vocab"].words
    assert list((tmp_path / "logs").rglob("events.out.tfevents.*"))  # CaptionMetrics' log_dir
