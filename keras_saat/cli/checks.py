"""The checks several commands share, run before TensorFlow loads.

`check_experiment` is the check of the commands that run an experiment config (`train`,
`extract-features`, `demo`); `check_trained` of those that load a trained model
(`evaluate`, `caption`, `export`, `serve`). What a check resolves it leaves on `args`.
"""

import dataclasses
from pathlib import Path

from keras_saat.cli.flags import check_folder_argument, trained
from keras_saat.errors import KerasSaatError

DEMO_RECIPE = "shapes_soft"  # keras_saat/recipes/shapes_soft.yaml


def check_experiment(args):
    """The config (file or recipe, keys, values, registry names), the files its dataset
    reader opens, a backbone weights file, and a --workdir that is a folder. The config
    goes to `args.experiment`."""
    from keras_saat.config import load_config
    from keras_saat.data.readers.reader_registry import check_inputs

    config = with_strict(load_config(getattr(args, "config", None) or DEMO_RECIPE, args.set), args)
    check_inputs(config.data)
    weights = config.model.backbone_weights
    # "imagenet" and "shapes" name weights the run makes or fetches; anything else is a file.
    if weights not in (None, "imagenet", "shapes") and not Path(weights).is_file():
        raise KerasSaatError(f"backbone weights file not found: {weights} (model.backbone_weights)")
    check_folder_argument("--workdir", args.workdir)
    args.experiment = config


def with_strict(config, args):
    """`config` with `data.strict` set where --strict was given."""
    if getattr(args, "strict", False):
        return dataclasses.replace(config, data=dataclasses.replace(config.data, strict=True))
    return config


def check_trained(args, overrides=None):
    """--workdir holds a config and a trained model, or --preset is a preset folder; the
    config overrides (default: --set) fit the saved config."""
    from keras_saat.config import load_config
    from keras_saat.models.preset import is_preset
    from keras_saat.workdir import CONFIG_FILE, MODEL_FILE

    overrides = list(getattr(args, "set", ())) if overrides is None else overrides
    path = Path(trained(args))
    if is_preset(path):
        load_config(None, overrides)
        return
    if args.preset:
        raise KerasSaatError(
            f"--preset {path}: {'no such folder' if not path.is_dir() else 'not a preset folder'} "
            "(a preset holds config.json and model.weights.h5); write one with "
            "`keras-saat export --format preset`"
        )
    if not path.is_dir():
        raise KerasSaatError(f"--workdir {path}: no such folder; train a model there first")
    if not (path / CONFIG_FILE).is_file():
        raise KerasSaatError(
            f"{path} is neither a workdir (no {CONFIG_FILE}) nor a preset folder; "
            "train a model there first, or give a preset written by `keras-saat export --format preset`"
        )
    if not (path / MODEL_FILE).is_file():
        raise KerasSaatError(
            f"{path} has no {MODEL_FILE}: training saves it after its first epoch; "
            f"run `keras-saat train` with this --workdir until it has"
        )
    load_config(path / CONFIG_FILE, overrides)
