"""`keras-saat demo`: generate Shapes, train a soft-attention captioner, show captions."""

from keras_saat.cli.checks import check_experiment
from keras_saat.cli.flags import command, log, set_argument, strict_argument
from keras_saat.cli.results import print_result

TUNE_MALLOC = True  # as `train`
PREFER_ONEDNN = True
INTERRUPTED = "the same command resumes from the last checkpoint"


def add_parser(sub):
    p = command(
        sub,
        "demo",
        "generate Shapes, train a soft-attention captioner, show captions",
        ("keras-saat demo", "keras-saat demo --workdir runs/demo --set train.epochs=2"),
    )
    set_argument(p)
    strict_argument(p)
    p.add_argument("--workdir", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--show", type=int, default=6, help="test captions to print (default 6)")
    return p


check = check_experiment  # the demo's recipe: checks.DEMO_RECIPE


def run(args):
    from keras_saat.experiment import train

    log(f"keras-saat demo: Show, Attend and Tell on the Shapes world, workdir {args.workdir}")
    result = train(args.experiment, args.workdir, log)
    log("\ntest captions (generated | a reference):")
    shown = list(zip(result["records"], result["captions"], strict=True))[: args.show]
    for record, caption in shown:
        log(f"  {record.path.name}: {caption}\n  {'':>10}  | {record.captions[1]}")
    print_result(result)
