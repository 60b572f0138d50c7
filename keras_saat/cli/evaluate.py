"""`keras-saat evaluate`: caption a split and score it (BLEU, METEOR, ROUGE-L, CIDEr)."""

from pathlib import Path

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
from keras_saat.errors import KerasSaatError


def add_parser(sub):
    p = command(
        sub,
        "evaluate",
        "caption a split and score it (BLEU, METEOR, ROUGE-L, CIDEr)",
        (
            "keras-saat evaluate --workdir runs/shapes_soft",
            "keras-saat evaluate --workdir runs/shapes_soft --split val --beam-size 1",
            "keras-saat evaluate --preset presets/shapes_soft --out scores/",
            "keras-saat evaluate --workdir best.keras --set data.dataset=karpathy "
            "--set data.path=data/dataset_shapes.json",
            "keras-saat evaluate --workdir runs/shapes_soft --robustness",
            "keras-saat evaluate --workdir runs/shapes_soft --set data.path=other/dataset_shapes.json "
            "--set data.shapes_seed=7 --out scores/seed7",
        ),
    )
    trained_model_arguments(p)
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="default test")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for predictions.json and metrics.json (default: WORKDIR/eval/SPLIT, "
        "or PRESET-eval/SPLIT or NAME-eval/SPLIT for NAME.keras here; needed when --set "
        "data.* names other images than the workdir's)",
    )
    p.add_argument(
        "--robustness",
        type=int,
        nargs="?",
        const=200,
        default=0,
        metavar="SCENES",
        help="Shapes only: also caption SCENES fresh scenes (default 200) under each "
        "photometric shift (background brightness, exposure, contrast, colour cast, JPEG, "
        "resolution, noise); rows in metrics.json",
    )
    beam_size_argument(p, "decode.beam_size, 3")
    set_argument(p)
    return p


MAX_ROBUSTNESS_SCENES = 100_000  # rendered and captioned 256 at a time


def check(args):
    """The trained model (`check_trained`), a dataset for a `.keras` file (it carries
    none), and a --robustness scene count in range."""
    if not 0 <= args.robustness <= MAX_ROBUSTNESS_SCENES:
        raise KerasSaatError(
            f"--robustness {args.robustness}: give a number of scenes from 1 to "
            f"{MAX_ROBUSTNESS_SCENES:,} (200 when the flag has no number)"
        )
    check_trained(args)
    from keras_saat.models.trained_model_path import KERAS_FILE  # not at --help

    if args.trained.kind == KERAS_FILE and not any(s.startswith("data.") for s in args.set):
        flag = "--workdir" if args.workdir else "--preset"
        raise KerasSaatError(
            f"{flag} {args.trained.path}: a .keras model carries no dataset; name one with "
            "--set data.dataset=... --set data.path=... (or give the workdir it was trained in)"
        )


def default_out(args):
    """--out, else for a `.keras` file NAME-eval/SPLIT here (None: the library's default,
    WORKDIR/eval/SPLIT or PRESET-eval/SPLIT)."""
    from keras_saat.models.trained_model_path import KERAS_FILE, KERAS_SUFFIX

    if args.out is not None or args.trained.kind != KERAS_FILE:
        return args.out
    return Path(f"{args.trained.path.name.removesuffix(KERAS_SUFFIX)}-eval") / args.split


def run(args):
    from keras_saat.experiment import evaluate
    from keras_saat.workdir import METRICS_FILE, PREDICTIONS_FILE

    result = evaluate(
        trained(args), args.split, args.beam_size, log, args.set, out=default_out(args),
        robustness=args.robustness,
    )  # fmt: skip
    print_scores(result)
    if result["robustness"]:
        from keras_saat.evaluation.robustness import robustness_table

        log(f"\nrobustness ({args.robustness} scenes a shift, greedy):")
        log(robustness_table(result["robustness"]))
    log(f"wrote {result['out'] / PREDICTIONS_FILE} and {METRICS_FILE}")
