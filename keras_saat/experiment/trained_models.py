"""A trained model and the config it was trained with, from a workdir or a preset
folder, and its export with that config's decode and export sections."""

import dataclasses
from pathlib import Path

from keras_saat.config import ExperimentConfig, from_dict, load_config, parse_override, to_dict
from keras_saat.errors import KerasSaatError
from keras_saat.export import export_model
from keras_saat.models.factories import load_captioner
from keras_saat.models.preset import is_preset, preset_metadata
from keras_saat.workdir import CONFIG_FILE, MODEL_FILE


def trained_model(path, overrides=()):
    """A trained Captioner and its ExperimentConfig, from a workdir or a preset folder.

    A workdir's config is its config.yaml; a preset's is the training config its
    metadata.json carries (defaults when it has none), with the decode section,
    `data.resize` and `export.max_pixels` taken from the model itself, so both decode as
    the model does, and `decode.meteor` at its default (how the workdir it came from was
    scored is not the preset's). `overrides` ("section.key=value") apply last, each parsed once,
    before the model loads. The model takes the config's `export.max_pixels`, so its
    `generate` refuses the images the config's SavedModel refuses, and no others.

    Returns:
        (Captioner, ExperimentConfig, bool: whether `path` is a preset).
    """
    path = Path(path)
    changes = [parse_override(text) for text in overrides]
    with_changes(ExperimentConfig(), changes)  # each value checked before the model loads
    if is_preset(path):
        model = load_captioner(path)
        saved = preset_metadata(path).get("config") or {}
        config = from_dict(saved, ExperimentConfig()) if saved else ExperimentConfig()
        config = dataclasses.replace(
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
        config = with_changes(config, changes)
    elif not (path / CONFIG_FILE).is_file():
        raise KerasSaatError(
            f"{path} is neither a workdir (no {CONFIG_FILE}) nor a preset folder; "
            "train a model there first, or give a preset written by `keras-saat export --format preset`"
        )
    else:
        config = with_changes(load_config(path / CONFIG_FILE), changes)
        model = load_captioner(path / MODEL_FILE)
    # A plain setting of the preprocessing (no weights or graph depend on it).
    model.max_pixels = config.export.max_pixels
    return model, config, is_preset(path)


def with_changes(config, changes):
    """`config` with parsed overrides (`parse_override`'s dicts) applied in order."""
    for change in changes:
        config = from_dict(change, config)
    return config


def export_workdir(workdir, out, version=None, overrides=(), log=print):
    """`keras-saat export`: a trained model with its config's decode and export sections.

    Args:
        workdir: path. A trained workdir (its best model), or a preset folder.
        out: path. The output folder.
        version: int or None. Defaults to None (the next free one).
        overrides: iterable of "section.key=value" applied to the saved config
            (`decode.beam_size=1`, `export.format=savedmodel`, ...).
        log: callable. Defaults to print.
    """
    model, config, _ = trained_model(workdir, overrides)
    metadata = {"experiment": config.name, "config": to_dict(config)}
    return export_model(model, out, config.decode, config.export, version, metadata, log)
