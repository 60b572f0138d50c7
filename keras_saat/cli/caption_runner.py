"""`keras-saat caption --runner NAME`: the checks and the run (`keras_saat.cli.caption`
calls these); docs/guides/scale-out.md runs it on Dataflow."""

import sys
from pathlib import Path

from keras_saat.cli.checks import check_beam_runner
from keras_saat.errors import KerasSaatError

# Flags of the one-process path that a SavedModel run cannot honour.
UNSUPPORTED = ("attention", "plot", "beam_size", "max_length", "max_pixels")


def check_caption_run(args):
    """The Beam run's arguments, checked before TensorFlow loads: apache_beam, the runner,
    the SavedModel, --out, Beam file systems and the images. Results go on `args`."""
    check_beam_runner(args)
    from apache_beam.io.filesystems import FileSystems

    from keras_saat.beam.captioning import expand_patterns, remote_call
    from keras_saat.beam.model_handler import is_remote
    from keras_saat.beam.pipeline_runs import saved_model_folder

    if not args.saved_model:
        raise KerasSaatError(
            "--runner runs a SavedModel: give --saved-model BASE (written by `keras-saat export`)"
        )
    for name in UNSUPPORTED:
        if getattr(args, name, None):
            raise KerasSaatError(
                f"--{name.replace('_', '-')} is not available with --runner: the SavedModel's decode settings "
                "are fixed at export (export again with other --beam-size/--max-length/--max-pixels)"
            )
    if not args.out:
        raise KerasSaatError("--runner writes shard files: give --out FOLDER (local or gs://)")
    if not is_remote(args.out) and Path(args.out).exists() and not Path(args.out).is_dir():
        raise KerasSaatError(f"--out {args.out} is a file; with --runner give a folder")
    for path in (args.saved_model, args.out):  # gs:// needs apache-beam[gcp]
        remote_call(path, FileSystems.get_filesystem, path)
    args.saved_model = saved_model_folder(args.saved_model)
    paths = expand_patterns(args.images)
    missing = [p for p in paths if not is_remote(p) and not Path(p).exists()]
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
