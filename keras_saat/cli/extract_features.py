"""`keras-saat extract-features`: run the frozen backbone once over every image, in this
process or, with --runner, as an Apache Beam pipeline (`extract_features_runner`)."""

from keras_saat.cli.checks import check_experiment
from keras_saat.cli.flags import (
    batch_size_argument,
    command,
    config_argument,
    log,
    runner_group,
    set_argument,
    strict_argument,
)

TUNE_MALLOC = True  # as `train`
INTERRUPTED = "the finished shards are kept; the same command extracts the rest"


def add_parser(sub):
    p = command(
        sub,
        "extract-features",
        "run the frozen backbone once over every image",
        (
            "keras-saat extract-features --config shapes_soft --workdir runs/shapes_soft",
            "keras-saat extract-features --config configs/flickr8k_vgg16_soft.yaml "
            "--workdir runs/flickr8k",
            "keras-saat extract-features --config shapes_soft --workdir runs/x --runner local",
        ),
    )
    config_argument(p)
    set_argument(p)
    strict_argument(p)
    p.add_argument("--workdir", required=True, help="the cache goes to WORKDIR/features")
    group = runner_group(
        p,
        runner_help="write the cache's shards with a Beam pipeline: local (this machine), "
        "direct, prism, dataflow, flink or spark; the same cache `train` reads",
        large_model_help="with --runner: one encoder per machine, shared by its worker processes",
    )
    batch_size_argument(p, "with --runner: images per encoder call (default 32)", group=group)
    return p


def check(args):
    """The experiment's config and inputs, then the Beam run's flags."""
    from keras_saat.cli.extract_features_runner import check_extract_run, check_no_runner_flags

    check_experiment(args)
    if args.runner:
        check_extract_run(args)
    else:
        check_no_runner_flags(args)


def run(args):
    if args.runner:
        from keras_saat.cli.extract_features_runner import cmd_extract_run

        cache = cmd_extract_run(args, log)
    else:
        from keras_saat.experiment import extract_only

        cache = extract_only(args.experiment, args.workdir, log)
    counts = ", ".join(f"{cache.count(s)} {s}" for s in cache.index["splits"])
    log(
        f"feature cache {cache.directory}: {counts} images, grid {cache.grid_shape}, {cache.channels} channels"
    )
