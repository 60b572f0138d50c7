"""`export.max_pixels`: generate(), `keras-saat caption` and the SavedModel of one workdir
refuse the same images, and a refusal names the setting."""

import dataclasses

import pytest
import tensorflow as tf
from PIL import Image

from keras_saat.cli import main
from keras_saat.config import ExperimentConfig, save_config
from keras_saat.experiment.trained_models import trained_model
from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS
from keras_saat.workdir import CONFIG_FILE, MODEL_FILE
from tests.helpers import small_model

LARGE = 100_000_000


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """A 30 MP solid PNG (6000 x 5000; a few KB on disk, 90 MB decoded)."""
    path = tmp_path_factory.mktemp("large") / "large.png"
    Image.new("RGB", (6000, 5000), (200, 40, 40)).save(path)
    return path


def workdir(root, max_pixels=None):
    """A workdir of an untrained small model, its config's export.max_pixels set when given."""
    root.mkdir()
    model, _ = small_model(max_length=4, beam_size=1)
    model.save(root / MODEL_FILE)
    config = ExperimentConfig()  # decoding as the model does, so the export agrees
    config = dataclasses.replace(
        config, decode=dataclasses.replace(config.decode, max_length=4, beam_size=1)
    )
    if max_pixels is not None:
        config = dataclasses.replace(
            config, export=dataclasses.replace(config.export, max_pixels=max_pixels)
        )
    save_config(config, root / CONFIG_FILE)
    return root


def test_the_default_refuses_a_30_mp_image_naming_the_setting(photo, tmp_path, capsys):
    model, _ = small_model(max_length=4, beam_size=1)
    assert model.max_pixels == DEFAULT_MAX_PIXELS == ExperimentConfig().export.max_pixels
    (result,) = model.generate([photo], return_details=True, errors="skip")
    assert result["caption"] is None
    assert "6000x5000 pixels" in result["error"] and "(export.max_pixels)" in result["error"]

    assert main(["caption", "--workdir", str(workdir(tmp_path / "default")), str(photo)]) == 2
    assert "(export.max_pixels)" in capsys.readouterr().err


def test_a_model_configured_at_100_mp_captions_it_through_generate(photo):
    from keras_saat.config import ModelConfig
    from keras_saat.models.factories import build_captioner
    from keras_saat.text import Vocabulary
    from tests.helpers import WORDS

    config = ModelConfig(feature_dim=16, embedding_dim=8, lstm_units=12, attention_units=8)
    model = build_captioner(config, Vocabulary.build([WORDS]), max_pixels=LARGE)
    assert model.max_pixels == LARGE and model.get_config()["max_pixels"] == LARGE
    (result,) = model.generate([photo], return_details=True, beam_size=1, max_length=4)
    assert result["error"] == "" and result["caption"] is not None


def test_a_workdir_at_100_mp_captions_it_in_caption(photo, tmp_path, capsys):
    """The workdir's config decides, not the built-in default: `caption` loads the model
    through `trained_model`, which gives it the config's export.max_pixels."""
    root = workdir(tmp_path / "run", LARGE)
    model, config, _ = trained_model(root)
    assert model.max_pixels == config.export.max_pixels == LARGE
    assert main(["caption", "--workdir", str(root), str(photo)]) == 0
    assert f"{photo}: " in capsys.readouterr().out


@pytest.mark.slow
def test_a_workdir_at_100_mp_captions_it_as_its_saved_model_does(photo, tmp_path):
    """`Captioner.generate` of the workdir's model and the SavedModel it exports agree."""
    root = workdir(tmp_path / "run", LARGE)
    model, _, _ = trained_model(root)
    (result,) = model.generate([photo], return_details=True)
    assert result["error"] == ""

    base = tmp_path / "export"
    assert main(["export", "--workdir", str(root), "--out", str(base)]) == 0
    serve = tf.saved_model.load(str(base / "1")).signatures["serving_default"]
    out = serve(image_bytes=tf.constant([photo.read_bytes()]))
    assert bool(out["valid"][0]) and out["error"][0].numpy() == b""
    assert out["caption"][0].numpy().decode() == result["caption"]
