"""`keras-saat evaluate`: caption a split and score it (BLEU, METEOR, ROUGE-L, CIDEr)."""

from keras_saat.cli.checks import check_trained
from keras_saat.cli.flags import (
    beam_size_argument,
    command,
    log,
    set_argument,
    trained,
    trained_model_arguments,
)
from keras_saat.cli.results import print_scores


def add_parser(sub):
    p = command(
        sub,
        "evaluate",
        "caption a split and score it (BLEU, METEOR, ROUGE-L, CIDEr)",
        (
            "keras-saat evaluate --workdir runs/shapes_soft",
            "keras-saat evaluate --workdir runs/shapes_soft --split val --beam-size 1",
            "keras-saat evaluate --preset presets/shapes_soft --out scores/",
        ),
    )
    trained_model_arguments(p)
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="default test")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for predictions.json and metrics.json (default: WORKDIR/eval/SPLIT, "
        "or PRESET-eval/SPLIT here)",
    )
    beam_size_argument(p, "decode.beam_size, 3")
    set_argument(p)
    return p


check = check_trained


def run(args):
    from keras_saat.experiment import evaluate
    from keras_saat.workdir import METRICS_FILE, PREDICTIONS_FILE

    result = evaluate(trained(args), args.split, args.beam_size, log, args.set, out=args.out)
    print_scores(result)
    log(f"wrote {result['out'] / PREDICTIONS_FILE} and {METRICS_FILE}")
