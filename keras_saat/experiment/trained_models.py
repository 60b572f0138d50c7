"""A trained model and the config it was trained with, from a workdir, a `.keras` file
or a preset folder, and its export with that config's decode and export sections."""

import dataclasses

from keras_saat.config import ExperimentConfig, from_dict, load_config, parse_override, to_dict
from keras_saat.export import export_model
from keras_saat.models.factories import load_captioner
from keras_saat.models.preset import preset_metadata
from keras_saat.models.trained_model_path import PRESET, WORKDIR, TrainedModelPath
from keras_saat.workdir import CONFIG_FILE


def trained_model(path, overrides=()):
    """A trained Captioner and its ExperimentConfig, from a workdir, a `.keras` file or a
    preset folder (str, Path or TrainedModelPath).

    A workdir's config is its config.yaml; a preset's is its metadata's training config and
    a `.keras` file's the defaults, both with the model's decode section, `data.resize` and
    `export.max_pixels` (`model_config`). `overrides` apply last, before the model loads,
    so `generate` refuses what the config's SavedModel refuses.

    Returns:
        (Captioner, ExperimentConfig, bool: whether `path` is no workdir).
    """
    found = path if isinstance(path, TrainedModelPath) else TrainedModelPath.of(path)
    changes = [parse_override(text) for text in overrides]
    with_changes(ExperimentConfig(), changes)  # each value checked before the model loads
    if found.kind == WORKDIR:
        config = with_changes(load_config(found.path / CONFIG_FILE), changes)
        model = load_captioner(found)
    else:
        model = load_captioner(found)
        saved = preset_metadata(found.path).get("config") if found.kind == PRESET else None
        config = with_changes(model_config(model, saved), changes)
    # A plain setting of the preprocessing (no weights or graph depend on it).
    model.max_pixels = config.export.max_pixels
    return model, config, found.kind != WORKDIR


def model_config(model, saved=None):
    """The ExperimentConfig of a model without a workdir: `saved` or the defaults, with the
    model's decode section, `data.resize` and `export.max_pixels`."""
    config = from_dict(saved, ExperimentConfig()) if saved else ExperimentConfig()
    return dataclasses.replace(
        config,
        decode=dataclasses.replace(
            config.decode,
            max_length=model.max_length,
            beam_size=model.beam_size,
            length_penalty=model.length_penalty,
            meteor=ExperimentConfig().decode.meteor,
        ),
        data=dataclasses.replace(config.data, resize=model.resize),
        export=dataclasses.replace(config.export, max_pixels=model.max_pixels),
    )


def with_changes(config, changes):
    """`config` with parsed overrides (`parse_override`'s dicts) applied in order."""
    for change in changes:
        config = from_dict(change, config)
    return config


def export_workdir(workdir, out, version=None, overrides=(), log=print):
    """`keras-saat export`: a trained model with its config's decode and export sections.

    Args:
        workdir: path or TrainedModelPath. As `trained_model` takes it.
        out: path. The output folder.
        version: int or None. Defaults to None (the next free one).
        overrides: iterable of "section.key=value" (`export.format=savedmodel`, ...).
        log: callable. Defaults to print.
    """
    model, config, _ = trained_model(workdir, overrides)
    metadata = {"experiment": config.name, "config": to_dict(config)}
    return export_model(model, out, config.decode, config.export, version, metadata, log)
