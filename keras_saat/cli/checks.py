"""The checks several commands share, run before TensorFlow loads; what a check resolves
it leaves on `args`."""

import dataclasses
from pathlib import Path

from keras_saat.cli.flags import check_folder_argument, trained
from keras_saat.errors import KerasSaatError

DEMO_RECIPE = "shapes_soft"  # keras_saat/recipes/shapes_soft.yaml


def check_experiment(args):
    """The config, the files its reader opens, a backbone weights file and --workdir; the
    config goes to `args.experiment`."""
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
    """--workdir or --preset names a trained model whose config the overrides fit; the
    classified path goes to `args.trained`, which the run loads without looking again."""
    from keras_saat.config import load_config
    from keras_saat.models.trained_model_path import WORKDIR, TrainedModelPath
    from keras_saat.workdir import CONFIG_FILE

    overrides = list(getattr(args, "set", ())) if overrides is None else overrides
    flag = "--workdir" if args.workdir else "--preset"
    found = TrainedModelPath.of(trained(args), flag)
    # A preset's or a .keras file's config is the model's own, known once it loads: the
    # overrides are checked against the defaults.
    load_config(found.path / CONFIG_FILE if found.kind == WORKDIR else None, overrides)
    args.trained = found
