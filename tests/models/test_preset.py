"""Preset folders: keras-hub's layout, a round trip, and clear errors."""

import json
import zipfile

import numpy as np
import pytest

from keras_saat import Captioner, load_captioner
from keras_saat.errors import KerasSaatError
from keras_saat.models import preset
from tests.helpers import small_model


@pytest.mark.slow
def test_a_preset_round_trips_config_weights_decode_settings_and_vocabulary(tmp_path):
    model, _ = small_model(beam_size=2, length_penalty=0.5, resize="pad", max_length=7)
    features = np.random.default_rng(0).normal(size=(3, 64, 128)).astype("float32")
    folder = model.save_to_preset(tmp_path / "p", metadata={"scores": {"bleu_4": 0.5}})

    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert names == ["assets/vocabulary.txt", "config.json", "metadata.json", "model.weights.h5"]
    config = json.loads((folder / preset.CONFIG_FILE).read_text())
    assert config["class_name"] == "Captioner" and config["config"]["vocabulary"] is None
    metadata = preset.preset_metadata(folder)
    assert metadata["parameter_count"] == model.count_params() and metadata["scores"]
    for key in ("keras_version", "keras_saat_version", "tensorflow_version", "date_saved"):
        assert metadata[key]

    loaded = Captioner.from_preset(folder)
    assert loaded.vocabulary.words == model.vocabulary.words
    for key in ("beam_size", "length_penalty", "resize", "max_length"):
        assert getattr(loaded, key) == getattr(model, key)
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    expected = model.generate(features=features, return_details=True)
    got = load_captioner(folder).generate(features=features, return_details=True)
    assert [g["caption"] for g in got] == [e["caption"] for e in expected]
    np.testing.assert_allclose([g["log_prob"] for g in got], [e["log_prob"] for e in expected])


def test_generate_decodes_with_the_models_own_beam_size(tmp_path):
    model, _ = small_model(beam_size=3)
    features = np.random.default_rng(1).normal(size=(4, 64, 128)).astype("float32")
    default = model.generate(features=features, return_details=True)
    beam = model.generate(features=features, beam_size=3, return_details=True)
    assert [d["log_prob"] for d in default] == [b["log_prob"] for b in beam]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d, "is not a preset folder"),
        (lambda d: "https://example.com/preset", "local folders only"),
    ],
)
def test_not_a_preset_is_a_clear_error(tmp_path, make, message):
    with pytest.raises(KerasSaatError, match=message):
        Captioner.from_preset(make(tmp_path))


def test_a_damaged_weights_file_is_a_clear_error(tmp_path):
    model, _ = small_model()
    folder = model.save_to_preset(tmp_path / "p")
    (folder / preset.WEIGHTS_FILE).write_bytes(b"not hdf5")
    with pytest.raises(KerasSaatError, match="cannot load the weights of the preset"):
        Captioner.from_preset(folder)


def test_evaluating_a_preset_without_its_training_config_asks_for_the_dataset(tmp_path):
    from keras_saat.experiment import evaluate

    model, _ = small_model()
    folder = model.save_to_preset(tmp_path / "p")
    with pytest.raises(KerasSaatError, match="carries no training config"):
        evaluate(folder, out=tmp_path / "eval", log=lambda *_: None)


@pytest.mark.slow
@pytest.mark.parametrize("named", ["/etc/hostname", "imagenet", "weights.h5"])
def test_loading_never_reads_a_path_or_downloads_what_the_file_names(tmp_path, named):
    """A preset or .keras file from elsewhere may name backbone_weights; loading ignores it:
    a saved model's weights are in the file."""
    model, vocab = small_model()
    features = np.random.default_rng(0).normal(size=(2, 64, 128)).astype("float32")
    expected = model.generate(features=features, beam_size=1)
    (tmp_path / "weights.h5").write_bytes(b"not weights: reading this would fail")
    preset = model.save_to_preset(tmp_path / "p")
    config = json.loads((preset / "config.json").read_text())
    config["config"]["backbone_weights"] = str(tmp_path / named) if named.endswith(".h5") else named
    (preset / "config.json").write_text(json.dumps(config))
    assert Captioner.from_preset(preset).generate(features=features, beam_size=1) == expected
    archive = tmp_path / "m.keras"
    model.save(archive)
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(tmp_path / "n.keras", "w") as out:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "config.json":
                saved = json.loads(data)
                saved["config"]["backbone_weights"] = named
                data = json.dumps(saved).encode()
            out.writestr(item, data)
    assert load_captioner(tmp_path / "n.keras").generate(features=features, beam_size=1) == expected


@pytest.mark.parametrize(
    "change",
    [{"lstm_units": "many"}, {"feature_dim": [1]}, {"backbone": 5}, {"attention": None}],
)
def test_a_malformed_preset_config_is_a_clear_error_not_a_traceback(tmp_path, change):
    model, _ = small_model()
    preset = model.save_to_preset(tmp_path / "p")
    config = json.loads((preset / "config.json").read_text())
    config["config"].update(change)
    (preset / "config.json").write_text(json.dumps(config))
    with pytest.raises(KerasSaatError, match="cannot read the preset"):
        Captioner.from_preset(preset)
