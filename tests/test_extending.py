"""A new attention type, dataset reader and export format: one class or function each and
one registration, all from this file; then the CLI trainer and `fit()` use them by name."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

from keras_saat import Captioner
from keras_saat.cli import main
from keras_saat.data import CaptionDataset, ImageRecord
from keras_saat.data.readers.reader_registry import register_reader
from keras_saat.export_formats import register_export_format
from keras_saat.layers import SoftAttention, register_attention
from keras_saat.text import Vocabulary
from tests.helpers import DEFAULTS


class UniformAttention(SoftAttention):
    """alpha_t = 1/L everywhere: the mean annotation, gated. No attention weights to learn."""

    def attend(self, projected, hidden, query=None):
        return ops.ones(ops.shape(projected)[:2], projected.dtype) / ops.shape(projected)[1]


register_attention("uniform_test", UniformAttention)


def read_lines(data, workdir, log):
    """One image a line: `split<TAB>image path<TAB>caption | caption | ...`."""
    records = []
    for imgid, line in enumerate(open(data.path).read().splitlines()):
        split, path, captions = line.split("\t")
        records.append(ImageRecord(imgid, Path(path), split, captions.split(" | ")))
    log(f"read {len(records)} lines")
    return CaptionDataset("lines", records)


register_reader("lines_test", read_lines)


def write_summary(model, out, decode, export, version=None, metadata=None, log=print):
    """An 'export' that writes what the model is: its name, attention and vocabulary size."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    summary = {"attention": model.attention, "vocabulary": len(model.vocabulary)}
    path.write_text(json.dumps({**summary, "beam_size": decode.beam_size}))
    return path


register_export_format("summary_test", write_summary)


def write_lines(shapes_dir, tmp_path):
    records = json.loads((shapes_dir / "dataset_shapes.json").read_text())["images"]
    lines = [
        "\t".join(
            (
                image["split"],
                str(shapes_dir / image["filepath"] / image["filename"]),
                " | ".join(s["raw"] for s in image["sentences"]),
            )
        )
        for image in records
    ]
    path = tmp_path / "captions.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_a_registered_attention_reader_and_export_format_train_and_export(
    shapes_dir, tmp_path, capsys
):
    workdir = tmp_path / "run"
    settings = [
        "data.dataset=lines_test",
        f"data.path={write_lines(shapes_dir, tmp_path)}",
        "model.attention=uniform_test",
        "model.feature_dim=16",
        "model.embedding_dim=8",
        "model.lstm_units=16",
        "model.attention_units=8",
        "train.epochs=1",
        "train.batch_size=64",
        "decode.max_length=6",
        "decode.beam_size=1",
        "decode.meteor=false",  # its scores are not read
    ]
    argv = ["train", "--config", DEFAULTS, "--workdir", str(workdir)]
    for setting in settings:
        argv += ["--set", setting]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "read 56 lines" in out and "uniform_test attention" in out
    history = json.loads((workdir / "history.json").read_text())
    assert history[0]["steps"] == -(
        -40 * 5 // 64
    )  # every training caption once, the last batch padded

    # The saved model rebuilds its attention by name, and attends uniformly.
    model = keras.saving.load_model(str(workdir / "model.keras"))
    assert isinstance(model.decoder.attention, UniformAttention)
    features = np.ones((1, model.encoder.num_locations, model.encoder.feature_channels))
    details = model.generate(features=features, return_details=True)
    np.testing.assert_allclose(details[0]["attention"], 1 / 64, rtol=1e-5)

    out = tmp_path / "exported"
    argv = ["export", "--workdir", str(workdir), "--out", str(out), "--format", "summary_test"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    expected = {"attention": "uniform_test", "vocabulary": len(model.vocabulary), "beam_size": 1}
    assert summary == expected


def test_a_registered_attention_trains_a_step_with_fit():
    vocab = Vocabulary.build([["a", "red", "circle"]])
    model = Captioner(
        vocab.words, attention="uniform_test", feature_dim=8, embedding_dim=8, lstm_units=8,
        attention_units=8, seed=0,
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    rng = np.random.default_rng(0)
    data = {
        "features": rng.normal(size=(4, 64, 128)).astype("float32"),
        "tokens": vocab.encode_batch([["a", "red", "circle"]] * 4, 5),
    }
    before = [np.array(w) for w in model.trainable_weights]
    logs = model.fit(data, batch_size=4, epochs=1, verbose=0).history
    assert np.isfinite(logs["loss"][0])
    assert any(
        not np.allclose(a, np.array(b))
        for a, b in zip(before, model.trainable_weights, strict=True)
    )
    assert "baseline" not in logs  # no REINFORCE: the type does not declare it
