"""The checks several commands share, run before TensorFlow loads; what a check resolves
it leaves on `args`."""

import dataclasses
from pathlib import Path

from keras_saat.cli.flags import check_folder_argument, trained
from keras_saat.errors import KerasSaatError

DEMO_RECIPE = "shapes_soft"  # keras_saat/recipes/shapes_soft.yaml


def check_experiment(args):
    """The config (with --strict), the files its reader opens, a backbone weights file and
    --workdir; the config goes to `args.experiment`."""
    from keras_saat.config import load_config
    from keras_saat.data.readers.reader_registry import check_inputs

    config = load_config(getattr(args, "config", None) or DEMO_RECIPE, args.set)
    if getattr(args, "strict", False):
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, strict=True))
    check_inputs(config.data)
    weights = config.model.backbone_weights
    # "imagenet" and "shapes" name weights the run makes or fetches; anything else is a file.
    if weights not in (None, "imagenet", "shapes") and not Path(weights).is_file():
        raise KerasSaatError(f"backbone weights file not found: {weights} (model.backbone_weights)")
    check_folder_argument("--workdir", args.workdir)
    args.experiment = config


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


def check_beam_runner(args):
    """apache_beam is installed and --runner names a runner, its canonical name left on
    `args.runner`. Without --verbose, Beam's import-time notes (optional cloud clients, a
    platform without `resource`) at the root logger go unshown."""
    if not getattr(args, "verbose", False):
        import logging

        logging.getLogger().setLevel(logging.ERROR)
    from keras_saat.beam import require_beam

    require_beam()
    from keras_saat.beam.pipeline_runs import runner_name

    args.runner = runner_name(args.runner)
