"""`keras-saat extract-features`: run the frozen backbone once over every image, in this
process or, with --runner, as an Apache Beam pipeline (apache_beam is imported only then)."""

from keras_saat.cli.checks import check_beam_runner, check_experiment
from keras_saat.cli.flags import (
    batch_size_argument,
    command,
    config_argument,
    log,
    runner_group,
    set_argument,
    strict_argument,
)
from keras_saat.errors import KerasSaatError

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
    """The experiment's config and inputs, then the Beam run's flags: --batch-size and
    --large-model only Beam honours."""
    check_experiment(args)
    if args.runner:
        check_beam_runner(args)
        args.batch_size = 32 if args.batch_size is None else args.batch_size
        return
    for flag, given in (("--batch-size", args.batch_size is not None),
                        ("--large-model", args.large_model)):  # fmt: skip
        if given:
            raise KerasSaatError(
                f"{flag} is for a Beam run: add --runner local (the one-process extractor "
                "batches 32 images)"
            )


def run(args):
    from keras_saat.experiment import extract_only

    if args.runner:  # the shards written by Beam, into the WORKDIR/features `train` reads
        from keras_saat.beam.extraction_runs import extract_features_beam

        cache = extract_only(
            args.experiment,
            args.workdir,
            log,
            extract_features_beam,
            runner=args.runner,
            beam_args=args.beam_args,
            batch_size=args.batch_size,
            large_model=args.large_model,
        )
    else:
        cache = extract_only(args.experiment, args.workdir, log)
    counts = ", ".join(f"{cache.count(s)} {s}" for s in cache.index["splits"])
    log(
        f"feature cache {cache.directory}: {counts} images, grid {cache.grid_shape}, {cache.channels} channels"
    )
