"""Captioner factories: a new model from a config, a trained one from its files."""

import dataclasses

import keras

from keras_saat.errors import KerasSaatError
from keras_saat.models.captioner import Captioner
from keras_saat.models.preset import load_preset
from keras_saat.models.preset_checks import check_keras_archive
from keras_saat.models.trained_model_path import PRESET, TrainedModelPath


def build_captioner(model_config, vocabulary, decode=None, resize="crop", max_pixels=None):
    """A Captioner from a `ModelConfig` and a Vocabulary (weights seeded by `model_config.seed`).

    Args:
        model_config: ModelConfig. Each field is a Captioner argument of the same name.
        vocabulary: Vocabulary.
        decode: DecodeConfig or None. max_length, beam_size and length_penalty; None =
            the Captioner's defaults. Defaults to None.
        resize: str. `data.resize`. Defaults to "crop".
        max_pixels: int or None. `export.max_pixels`; None = the Captioner's default.
            Defaults to None.
    """
    keras.utils.set_random_seed(model_config.seed)
    settings = dataclasses.asdict(model_config)
    settings["image_size"] = settings["image_size"] or None  # 0 = the backbone's default
    if decode is not None:
        keys = ("max_length", "beam_size", "length_penalty")
        settings.update({key: getattr(decode, key) for key in keys})
    if max_pixels is not None:
        settings["max_pixels"] = max_pixels
    return Captioner(vocabulary=list(vocabulary.words), resize=resize, **settings)


def load_captioner(path):
    """Loads a Captioner: a `.keras` file, a workdir (its `model.keras`) or a preset folder.

    Args:
        path: str, Path or TrainedModelPath. Where the model is; a path is classified
            once (`TrainedModelPath.of`), a TrainedModelPath is taken as it was classified.
    """
    found = path if isinstance(path, TrainedModelPath) else TrainedModelPath.of(path)
    if found.kind == PRESET:
        return load_preset(found.path, Captioner)
    path = found.model_file
    try:  # the sizes it declares, before Keras unpacks or builds anything
        check_keras_archive(path)
    except KerasSaatError as err:
        raise KerasSaatError(f"cannot load the model {path}: {err}") from None
    try:
        model = keras.saving.load_model(str(path))
    except Exception as err:  # a damaged archive raises zipfile, h5py or Keras errors
        raise KerasSaatError(f"cannot load the model {path}: {err}") from None
    if not isinstance(model, Captioner):
        raise KerasSaatError(f"{path} holds a {type(model).__name__}, not a keras_saat Captioner")
    return model
