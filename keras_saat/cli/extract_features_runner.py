"""`keras-saat extract-features --runner NAME`: its checks and run.

    keras-saat extract-features --config shapes_soft --workdir runs/x --runner local \\
        -- --direct_num_workers=2 --direct_running_mode=multi_processing

Nothing here imports apache_beam or TensorFlow until the command runs.
"""

from keras_saat.beam import require_beam


def check_no_runner_flags(args):
    """Without --runner: --batch-size and --large-model, which only Beam honours, are refused."""
    from keras_saat.errors import KerasSaatError

    for flag, given in (("--batch-size", getattr(args, "batch_size", None) is not None),
                        ("--large-model", getattr(args, "large_model", False))):  # fmt: skip
        if given:
            raise KerasSaatError(
                f"{flag} is for a Beam run: add --runner local (the one-process extractor "
                "batches 32 images)"
            )


def check_extract_run(args):
    """Before TensorFlow loads: apache_beam is installed and the runner is known."""
    if not getattr(args, "verbose", False):
        import logging

        logging.getLogger().setLevel(logging.ERROR)  # Beam's import-time notes
    require_beam()
    from keras_saat.beam.pipeline_runs import runner_name

    args.runner = runner_name(args.runner)
    args.batch_size = 32 if args.batch_size is None else args.batch_size


def cmd_extract_run(args, log=print):
    """`extract_only` with the shards written by Beam, into the WORKDIR/features `train`
    reads; returns the FeatureCache."""
    from keras_saat.beam.extraction_runs import extract_features_beam
    from keras_saat.experiment.preparation import extract_only

    return extract_only(
        args.experiment,
        args.workdir,
        log,
        extract_features_beam,
        runner=args.runner,
        beam_args=args.beam_args,
        batch_size=args.batch_size,
        large_model=args.large_model,
    )
