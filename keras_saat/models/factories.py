"""Captioner factories: a new model from a config, a trained one from its files.

model = build_captioner(config.model, vocabulary, config.decode, config.data.resize,
                        config.export.max_pixels)
model = load_captioner("runs/demo")        # a workdir, a .keras file or a preset
"""

import dataclasses

import keras

from keras_saat.errors import KerasSaatError
from keras_saat.models.captioner import Captioner
from keras_saat.models.preset import load_preset
from keras_saat.models.preset_checks import check_keras_archive
from keras_saat.models.trained_model_path import PRESET, TrainedModelPath


def build_captioner(model_config, vocabulary, decode=None, resize="crop", max_pixels=None):
    """A Captioner from a `ModelConfig` and a Vocabulary (weights seeded by `model_config.seed`).

    Every ModelConfig field is a Captioner argument of the same name. The decoding
    settings (max_length, beam_size, length_penalty) come from `decode`, a `DecodeConfig`
    (None = the Captioner's defaults, which are DecodeConfig's), and `resize` from
    `data.resize`, and the largest image it decodes from `max_pixels` (`export.max_pixels`;
    None = the Captioner's default): the model keeps them, so every way of captioning with
    it decodes, resizes and refuses alike.
    """
    keras.utils.set_random_seed(model_config.seed)
    settings = dataclasses.asdict(model_config)
    settings["image_size"] = settings["image_size"] or None  # 0 = the backbone's default
    if decode is not None:
        settings.update(
            max_length=decode.max_length,
            beam_size=decode.beam_size,
            length_penalty=decode.length_penalty,
        )
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
