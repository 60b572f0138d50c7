"""`keras-saat caption --runner NAME`: the checks and the run (`keras_saat.cli.caption` calls these).

    keras-saat caption --saved-model models/cap photos/ --out captions/ --runner local
    keras-saat caption --saved-model gs://b/models/cap 'gs://b/photos/*.jpg' \\
        --out gs://b/captions --runner dataflow -- --project=P --region=R \\
        --temp_location=gs://b/tmp --sdk_container_image=IMAGE
"""

import sys
from pathlib import Path

from keras_saat.beam import require_beam
from keras_saat.errors import KerasSaatError

# Flags of the one-process path that a SavedModel run cannot honour.
UNSUPPORTED = (
    ("attention", "--attention"),
    ("plot", "--plot"),
    ("beam_size", "--beam-size"),
    ("max_length", "--max-length"),
    ("max_pixels", "--max-pixels"),
)


def check_caption_run(args):
    """The Beam run's arguments, checked before TensorFlow loads: apache_beam, the runner,
    the SavedModel, --out, Beam file systems and the images. Results go on `args`."""
    if not getattr(args, "verbose", False):
        import logging

        # Beam's import-time notes (optional cloud clients, a platform without `resource`)
        # go to the root logger; --verbose shows them.
        logging.getLogger().setLevel(logging.ERROR)
    require_beam()
    from apache_beam.io.filesystems import FileSystems

    from keras_saat.beam.captioning import expand_patterns, remote_call
    from keras_saat.beam.model_handler import is_remote
    from keras_saat.beam.pipeline_runs import runner_name, saved_model_folder

    args.runner = runner_name(args.runner)
    if not args.saved_model:
        raise KerasSaatError(
            "--runner runs a SavedModel: give --saved-model BASE (written by `keras-saat export`)"
        )
    for name, flag in UNSUPPORTED:
        if getattr(args, name, None):
            raise KerasSaatError(
                f"{flag} is not available with --runner: the SavedModel's decode settings "
                "are fixed at export (export again with other --beam-size/--max-length/--max-pixels)"
            )
    if not args.out:
        raise KerasSaatError("--runner writes shard files: give --out FOLDER (local or gs://)")
    if not is_remote(args.out):
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise KerasSaatError(f"--out {args.out} is a file; with --runner give a folder")
    for path in (args.saved_model, args.out):  # gs:// needs apache-beam[gcp]
        remote_call(path, FileSystems.get_filesystem, path)
    args.saved_model = saved_model_folder(args.saved_model)
    paths = expand_patterns(args.images)
    local = [p for p in paths if not is_remote(p)]
    missing = [p for p in local if not Path(p).exists()]
    if missing and len(missing) == len(paths):
        raise KerasSaatError(f"{missing[0]}: no such file")
    for path in missing:
        print(f"keras-saat: {path}: no such file", file=sys.stderr)
    args.paths = paths


def cmd_caption_run(args, log=print):
    """Captions `args.paths` with Beam into shard files under --out."""
    from keras_saat.beam.pipeline_runs import caption_run
    from keras_saat.config import DecodeConfig

    summary = caption_run(
        args.saved_model,
        args.paths,
        args.out,
        runner=args.runner,
        beam_args=args.beam_args,
        batch_size=args.batch_size or DecodeConfig.batch_size,
        shard_size=args.shard_size,
        large_model=args.large_model,
        log=log,
    )
    written = summary["shards"] - summary["skipped"]
    log(
        f"wrote {summary['images'] - summary['errors']} captions in {written} shard files "
        f"to {args.out}"
    )
    if summary["errors"]:
        raise KerasSaatError(
            f"{summary['errors']} of {summary['images']} images could not be captioned (their "
            "rows carry the error; delete a shard's file to caption its images again)"
        )
