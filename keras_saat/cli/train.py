"""`keras-saat train`: train a captioner from a YAML config."""

from keras_saat.cli.checks import check_experiment
from keras_saat.cli.flags import command, config_argument, log, set_argument, strict_argument
from keras_saat.cli.results import print_result

# Freed memory is kept for the next step and oneDNN's kernels preferred, both set before
# TensorFlow starts (keras_saat/runtime/memory.py, cpu_kernels.py).
TUNE_MALLOC = True
PREFER_ONEDNN = True


def add_parser(sub):
    p = command(
        sub,
        "train",
        "train a captioner from a YAML config",
        (
            "keras-saat train --config shapes_soft --workdir runs/shapes_soft",
            "keras-saat train --config shapes_hard --workdir runs/shapes_hard --set train.epochs=5",
            "keras-saat train --config configs/flickr8k_vgg16_soft.yaml --workdir runs/flickr8k",
        ),
    )
    config_argument(p)
    set_argument(p)
    strict_argument(p)
    p.add_argument(
        "--workdir",
        required=True,
        help="folder for the config, vocabulary, cache, model and scores",
    )
    return p


check = check_experiment


def run(args):
    from keras_saat.experiment import train

    print_result(train(args.experiment, args.workdir, log))
