"""Preset folders: a trained Captioner in keras-hub's layout, local folders only.

config.json              the Captioner's Keras config, the vocabulary left out
model.weights.h5         every weight, the frozen backbone's included
metadata.json            versions, parameter count, date, training config and scores
assets/vocabulary.txt    one token a line, in id order
"""

import datetime
import json
from pathlib import Path

from keras_saat.errors import KerasSaatError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
ASSET_DIR = "assets"
VOCABULARY_FILE = "vocabulary.txt"


def is_preset(path):
    """Whether `path` is a preset folder (it holds config.json and model.weights.h5)."""
    path = Path(path)
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def save_preset(model, preset_dir, metadata=None):
    """Writes `model` into `preset_dir` (created if missing); returns the folder.

    Args:
        model: Captioner. Saved in float32 whatever precision it computes in.
        preset_dir: str or Path.
        metadata: dict or None. Extra metadata.json entries (the training config as
            "config", test scores as "scores"). Defaults to None.
    """
    import keras
    import tensorflow as tf

    import keras_saat

    if model.precision != "float32":
        model = model.with_precision("float32")
    preset_dir = Path(preset_dir)
    if preset_dir.exists() and not preset_dir.is_dir():
        raise KerasSaatError(f"{preset_dir} is a file; a preset is a folder")
    (preset_dir / ASSET_DIR).mkdir(parents=True, exist_ok=True)
    config = keras.saving.serialize_keras_object(model)
    config["config"]["vocabulary"] = None  # read back from the asset
    (preset_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    model.vocabulary.save(preset_dir / ASSET_DIR / VOCABULARY_FILE)
    model.save_weights(preset_dir / WEIGHTS_FILE)
    entries = {
        "keras_version": keras.version(),
        "keras_saat_version": keras_saat.__version__,
        "tensorflow_version": tf.__version__,
        "parameter_count": model.count_params(),
        "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
        **(metadata or {}),
    }
    (preset_dir / METADATA_FILE).write_text(json.dumps(entries, indent=2, default=str))
    return preset_dir


def preset_metadata(preset_dir):
    """metadata.json of a preset folder as a dict ({} when it has none)."""
    from keras_saat.models.preset_checks import MAX_CONFIG_BYTES, check_file_size

    path = Path(preset_dir) / METADATA_FILE
    if not path.is_file():
        return {}
    check_file_size(path, MAX_CONFIG_BYTES, METADATA_FILE)
    try:
        metadata = json.loads(path.read_text())
    except ValueError as err:  # not JSON, or not UTF-8
        raise KerasSaatError(f"{path} is not JSON: {err}") from None
    return metadata if isinstance(metadata, dict) else {}


def _unreadable(preset_dir, err):
    """The error for a preset whose config, vocabulary or Keras objects cannot be read."""
    detail = err if isinstance(err, KerasSaatError) else f"{type(err).__name__}: {err}"
    return KerasSaatError(f"cannot read the preset {preset_dir}: {detail}")


def load_preset(preset_dir, cls):
    """The model saved in `preset_dir`, its weights loaded (`Captioner.from_preset`).

    Args:
        preset_dir: str or Path. A local preset folder.
        cls: the class expected (Captioner or a subclass).
    """
    import keras

    from keras_saat.models import preset_checks as checks
    from keras_saat.text.vocabulary import Vocabulary

    text = str(preset_dir)
    if "://" in text:
        raise KerasSaatError(
            f"{text}: presets load from local folders only; download it first "
            "(keras-hub's or Kaggle's and Hugging Face's tools) and pass the folder"
        )
    preset_dir = Path(preset_dir)
    if not is_preset(preset_dir):
        raise KerasSaatError(
            f"{preset_dir} is not a preset folder (no {CONFIG_FILE} and {WEIGHTS_FILE}); "
            "write one with `Captioner.save_to_preset` or `keras-saat export --format preset`"
        )
    config_path = preset_dir / CONFIG_FILE
    try:  # config.json and the vocabulary, checked before anything is built
        checks.check_file_size(config_path, checks.MAX_CONFIG_BYTES, CONFIG_FILE)
        config = json.loads(config_path.read_text())
        if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
            raise KerasSaatError(f'{config_path} holds no Keras config (no "config" object)')
        vocabulary = Vocabulary.load(
            preset_dir / ASSET_DIR / VOCABULARY_FILE,
            max_words=checks.MAX_VOCABULARY_WORDS,
            max_bytes=checks.MAX_VOCABULARY_BYTES,
        )
        checks.check_model_sizes(config["config"], len(vocabulary), config_path)
    except Exception as err:  # a malformed config.json
        raise _unreadable(preset_dir, err) from None
    try:  # the weights' headers against the config, before Keras allocates the model
        checks.check_weights_file(preset_dir / WEIGHTS_FILE, config["config"], len(vocabulary))
    except KerasSaatError as err:
        raise KerasSaatError(f"cannot load the weights of the preset {preset_dir}: {err}") from None
    try:
        config["config"]["vocabulary"] = list(vocabulary.words)
        model = keras.saving.deserialize_keras_object(config)
    except Exception as err:  # any malformed config.json: JSON, Keras and our own checks
        raise _unreadable(preset_dir, err) from None
    if not isinstance(model, cls):
        raise KerasSaatError(f"{preset_dir} holds a {type(model).__name__}, not a {cls.__name__}")
    try:
        model.load_weights(preset_dir / WEIGHTS_FILE)
    except Exception as err:  # h5py and Keras raise several kinds for a damaged file
        raise KerasSaatError(f"cannot load the weights of the preset {preset_dir}: {err}") from None
    return model
