"""`trained_model` and `load_captioner` read a workdir, a `.keras` file and a preset folder,
each path looked at once (`TrainedModelPath`)."""

import dataclasses
import re
import shutil

import numpy as np
import pytest

from keras_saat import load_captioner
from keras_saat.config import ExperimentConfig, save_config
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.trained_models import trained_model
from keras_saat.models.trained_model_path import (
    KERAS_FILE,
    PRESET,
    WORKDIR,
    TrainedModelPath,
)


@pytest.fixture(scope="module")
def three_kinds(small_preset, tmp_path_factory):
    """The shared small preset's model (captions of at most 5 words, beam 2) as a preset,
    a `.keras` file and a workdir whose config.yaml sets export.max_pixels."""
    root = tmp_path_factory.mktemp("three_kinds")
    load_captioner(small_preset).save(root / "best.keras")
    workdir = root / "run"
    workdir.mkdir()
    shutil.copy(root / "best.keras", workdir / "model.keras")
    config = ExperimentConfig()
    config = dataclasses.replace(
        config,
        decode=dataclasses.replace(config.decode, max_length=5, beam_size=2),
        export=dataclasses.replace(config.export, max_pixels=12345),
    )
    save_config(config, workdir / "config.yaml")
    return {PRESET: small_preset, KERAS_FILE: root / "best.keras", WORKDIR: workdir}


def test_each_kind_loads_the_same_model_with_the_config_it_carries(three_kinds):
    features = np.random.default_rng(0).normal(size=(2, 64, 128)).astype("float32")
    captions = {}
    for kind, path in three_kinds.items():
        assert TrainedModelPath.of(path).kind == kind
        model, config, no_workdir = trained_model(path)
        assert no_workdir == (kind != WORKDIR)
        assert (config.decode.max_length, config.decode.beam_size) == (5, 2)
        assert model.max_pixels == config.export.max_pixels
        captions[kind] = model.generate(features=features)
    assert captions[KERAS_FILE] == captions[PRESET] == captions[WORKDIR]

    # A .keras file's config: the defaults, with the model's decoding and image settings.
    model, config, _ = trained_model(three_kinds[KERAS_FILE])
    assert config.decode.meteor is ExperimentConfig().decode.meteor
    assert config.export.max_pixels == model.max_pixels == ExperimentConfig().export.max_pixels
    assert trained_model(three_kinds[WORKDIR])[1].export.max_pixels == 12345
    model, config, _ = trained_model(three_kinds[KERAS_FILE], ["export.max_pixels=99"])
    assert model.max_pixels == config.export.max_pixels == 99


def test_a_classified_path_is_not_looked_at_again(three_kinds, monkeypatch):
    found = [TrainedModelPath.of(path) for path in three_kinds.values()]

    def again(cls, path, flag=None):
        raise AssertionError(f"{path} looked at again")

    monkeypatch.setattr(TrainedModelPath, "of", classmethod(again))
    for path in found:
        assert trained_model(path)[0].max_length == 5


def test_a_folder_holding_only_a_model_file_reads_as_that_file(three_kinds, tmp_path):
    shutil.copy(three_kinds[KERAS_FILE], tmp_path / "model.keras")
    found = TrainedModelPath.of(tmp_path)
    assert (found.kind, found.model_file) == (KERAS_FILE, tmp_path / "model.keras")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "none", "none: no such file or folder; give a trained workdir, a "
         ".keras file or a preset folder"),
        (lambda d: d, "is neither a workdir (no config.yaml) nor a preset folder"),
        (lambda d: (d / "m.h5").write_bytes(b"") or d / "m.h5",
         "m.h5 is a file but not a .keras file"),
        (lambda d: save_config(ExperimentConfig(), d / "config.yaml") or d,
         "has no model.keras: training saves it after its first epoch"),
        (lambda d: "gs://bucket/best.keras", "load from local files only"),
    ],
)  # fmt: skip
def test_what_holds_no_trained_model_is_one_line_naming_the_path(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(KerasSaatError, match=re.escape(message)) as raised:
        load_captioner(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(KerasSaatError, match=f"^--workdir {re.escape(str(path))}"):
        TrainedModelPath.of(path, "--workdir")
