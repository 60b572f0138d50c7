"""`keras-saat train`: train a captioner from a YAML config, or resume a workdir with its
own config.yaml."""

from pathlib import Path

from keras_saat.cli.checks import check_experiment
from keras_saat.cli.flags import command, config_argument, log, set_argument, strict_argument
from keras_saat.cli.results import print_result
from keras_saat.errors import KerasSaatError
from keras_saat.workdir import CONFIG_FILE

TUNE_MALLOC = True
PREFER_ONEDNN = True
INTERRUPTED = "the same command resumes from the last checkpoint"  # saved where it stops


def add_parser(sub):
    p = command(
        sub,
        "train",
        "train a captioner from a YAML config, or resume a workdir",
        (
            "keras-saat train --config shapes_soft --workdir runs/shapes_soft",
            "keras-saat train --config shapes_hard --workdir runs/shapes_hard --set train.epochs=5",
            "keras-saat train --config configs/flickr8k_vgg16_soft.yaml --workdir runs/flickr8k",
            "keras-saat train --workdir runs/shapes_soft --set train.epochs=8",
        ),
    )
    config_argument(p, required=False, default_help="resume --workdir with its config.yaml")
    set_argument(p)
    strict_argument(p)
    p.add_argument(
        "--workdir",
        required=True,
        help="folder for the config, vocabulary, cache, model and scores",
    )
    return p


def check(args):
    """`check_experiment`; without --config, the workdir's own config.yaml (a resume)."""
    if args.config is None:
        saved = Path(args.workdir) / CONFIG_FILE
        if not saved.is_file():
            raise KerasSaatError(
                f"--workdir {args.workdir} holds no {CONFIG_FILE} to resume; give --config "
                "FILE or a recipe (shapes_soft, ...) to start a run there"
            )
        args.config = str(saved)
    check_experiment(args)


def run(args):
    from keras_saat.experiment import train

    print_result(train(args.experiment, args.workdir, log))
