"""The `keras-saat` command line: parse, check, then load TensorFlow and call the library.

Each command's arguments, config, registry names and input paths are checked before
TensorFlow is imported (`keras_saat.commands`, the `check_*` functions), so a mistake
is answered in a fraction of a second; nothing this module or `commands` imports at
the top loads TensorFlow.
"""

import argparse
import sys

from keras_saat.beam.extraction_command import runner_arguments as extraction_runner_arguments
from keras_saat.commands import (
    check_bench,
    check_caption,
    check_experiment,
    check_export,
    check_make_shapes,
    check_serve,
    check_trained,
    cmd_bench,
    cmd_caption,
    cmd_demo,
    cmd_evaluate,
    cmd_export,
    cmd_extract_features,
    cmd_make_shapes,
    cmd_serve,
    cmd_train,
)
from keras_saat.runtime.tf_logs import import_tensorflow_quietly, quiet_tensorflow_logs

# Commands that never load TensorFlow.
WITHOUT_TENSORFLOW = (cmd_make_shapes,)


def _version():
    """The installed distribution's version; the package's own when run from a checkout."""
    from importlib import metadata

    try:
        return metadata.version("keras-saat")
    except metadata.PackageNotFoundError:
        from keras_saat import __version__

        return __version__


class _VersionAction(argparse.Action):
    """--version: the version is looked up only when asked for."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"keras-saat {_version()}")
        parser.exit()


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def _count(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _examples(*lines):
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _command(sub, name, help, examples, **kwargs):
    """A sub-command with its Examples section and --verbose."""
    parser = sub.add_parser(
        name,
        help=help,
        description=kwargs.pop("description", help),
        epilog=_examples(*examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    # SUPPRESS: the top-level --verbose (before the command) is not reset by this default.
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show TensorFlow's start-up and C++ log lines",
    )
    return parser


def _trained_model_arguments(parser, required=True, saved_model=False):
    """--workdir or --preset (or, for a Beam run, --saved-model): where a trained model is."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--workdir", help="a trained workdir (its best model and config)")
    group.add_argument(
        "--preset",
        metavar="DIR",
        help="a preset folder (Captioner.save_to_preset, or export --format preset)",
    )
    if saved_model:
        group.add_argument(
            "--saved-model",
            metavar="BASE",
            help="with --runner: a `keras-saat export` model base or version folder "
            "(local or gs://)",
        )


def _runner_arguments(parser):
    """--runner and the Beam run's settings; Beam's own options follow a `--`."""
    group = parser.add_argument_group(
        'Apache Beam (pip install "keras-saat[beam]"; Beam\'s own options after `--`)'
    )
    group.add_argument(
        "--runner",
        metavar="NAME",
        help="run as a Beam pipeline: local (this machine), direct, prism, dataflow, flink "
        "or spark; --out is then a folder of shard files",
    )
    group.add_argument(
        "--shard-size",
        type=_positive_int,
        default=500,
        help="with --runner: images per output file, the unit a rerun skips (default 500)",
    )
    group.add_argument(
        "--large-model",
        action="store_true",
        help="with --runner: one model copy per machine, shared by its worker processes",
    )
    parser.set_defaults(beam_args=[])


def split_beam_args(argv):
    """(keras-saat's arguments, Beam's): Beam's follow the first `--` after --runner."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if not any(a == "--runner" or a.startswith("--runner=") for a in argv[:cut]):
        return argv, []
    return argv[:cut], argv[cut + 1 :]


def _experiment_arguments(parser, workdir_help, config=True):
    if config:
        parser.add_argument(
            "--config",
            required=True,
            help="YAML experiment config (see configs/), or a packaged recipe: "
            "shapes_soft, shapes_hard, shapes_soft_gpu, shapes_lite0",
        )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set train.epochs=5 (repeatable)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="stop at the first unreadable image or bad caption"
    )
    if workdir_help:
        parser.add_argument("--workdir", required=True, help=workdir_help)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-saat",
        description="Show, Attend and Tell (Xu et al., 2015) with Keras 3 / TensorFlow.",
        epilog=_examples(
            "keras-saat demo",
            "keras-saat train --config shapes_soft --workdir runs/shapes_soft",
            "keras-saat caption --workdir runs/shapes_soft photos/",
            "keras-saat COMMAND --help",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=False,
        help="show TensorFlow's start-up and C++ log lines",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(
        sub,
        "make-shapes",
        "render a Shapes world dataset (Karpathy split format)",
        (
            "keras-saat make-shapes --out data/shapes",
            "keras-saat make-shapes --out data/tiny --train 40 --val 8 --test 8 --seed 1",
        ),
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--train", type=_count, default=2000, help="training images (default 2000)")
    p.add_argument("--val", type=_count, default=200, help="validation images (default 200)")
    p.add_argument("--test", type=_count, default=200, help="test images (default 200)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.set_defaults(func=cmd_make_shapes, check=check_make_shapes)

    p = _command(
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
    _experiment_arguments(p, "the cache goes to WORKDIR/features")
    extraction_runner_arguments(p)
    p.set_defaults(func=cmd_extract_features, check=check_experiment)

    p = _command(
        sub,
        "train",
        "train a captioner from a YAML config",
        (
            "keras-saat train --config shapes_soft --workdir runs/shapes_soft",
            "keras-saat train --config shapes_hard --workdir runs/shapes_hard --set train.epochs=5",
            "keras-saat train --config configs/flickr8k_vgg16_soft.yaml --workdir runs/flickr8k",
        ),
    )
    _experiment_arguments(p, "folder for the config, vocabulary, cache, model and scores")
    p.set_defaults(func=cmd_train, check=check_experiment)

    p = _command(
        sub,
        "evaluate",
        "caption a split and score it (BLEU, METEOR, ROUGE-L, CIDEr)",
        (
            "keras-saat evaluate --workdir runs/shapes_soft",
            "keras-saat evaluate --workdir runs/shapes_soft --split val --beam-size 1",
            "keras-saat evaluate --preset presets/shapes_soft --out scores/",
        ),
    )
    _trained_model_arguments(p)
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="default test")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for predictions.json and metrics.json (default: WORKDIR/eval/SPLIT, "
        "or PRESET-eval/SPLIT here)",
    )
    p.add_argument(
        "--beam-size",
        type=_positive_int,
        default=None,
        help="beam width (default: decode.beam_size, 3)",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p.set_defaults(func=cmd_evaluate, check=check_trained)

    p = _command(
        sub,
        "caption",
        "caption images, folders or globs; --out writes JSON lines or CSV",
        (
            "keras-saat caption --workdir runs/shapes_soft photo.png",
            "keras-saat caption --workdir runs/shapes_soft photos/ --out captions.jsonl",
            "keras-saat caption --preset presets/shapes_soft 'photos/**/*.jpg' --out captions.csv",
            "keras-saat caption --workdir runs/shapes_soft photos/ --plot attention.png",
            "keras-saat caption --saved-model models/cap photos/ --out captions/ --runner local",
            "keras-saat caption --saved-model models/cap photos/ --out captions/ --runner local "
            "-- --direct_num_workers=2 --direct_running_mode=multi_processing",
        ),
    )
    _trained_model_arguments(p, saved_model=True)
    p.add_argument(
        "images",
        nargs="+",
        metavar="PATH",
        help="image files (JPEG, PNG, GIF, BMP), folders (searched recursively) or globs",
    )
    p.add_argument(
        "--out",
        metavar="FILE.jsonl|FILE.csv",
        help="write one row per image (image, caption, log_prob, error); a second run "
        "skips the images already captioned there",
    )
    p.add_argument(
        "--batch-size", type=_positive_int, help="images per batch (default: decode.batch_size)"
    )
    p.add_argument(
        "--beam-size",
        type=_positive_int,
        default=None,
        help="beam width (default: the model's; 1 = greedy)",
    )
    p.add_argument("--max-length", type=_positive_int, default=None, help="maximum words")
    p.add_argument(
        "--attention",
        action="store_true",
        help="add each word's attention grid to the rows (JSON lines only)",
    )
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="write the paper's Figure 2 layout: OUT.png for one image, OUT_<image name>.png "
        "for each of several",
    )
    _runner_arguments(p)
    p.set_defaults(func=cmd_caption, check=check_caption)

    p = _command(
        sub,
        "export",
        "write the best model as a SavedModel for TF Serving, or a preset folder",
        (
            "keras-saat export --workdir runs/shapes_soft --out models/keras_saat",
            "keras-saat export --workdir runs/shapes_soft --out presets/shapes_soft "
            "--format preset",
            "keras-saat export --workdir runs/shapes_soft --out litert --format litert "
            "--quantize int8",
        ),
    )
    _trained_model_arguments(p)
    p.add_argument(
        "--out",
        required=True,
        metavar="BASE",
        help="TF Serving model base folder (--format preset: the preset folder; litert: "
        "the folder for NAME.tflite and vocab.txt)",
    )
    p.add_argument(
        "--version", type=int, default=None, help="version folder (default: the next free one)"
    )
    p.add_argument(
        "--beam-size", type=int, default=None, help="beam width (default: decode.beam_size, 3)"
    )
    p.add_argument(
        "--max-length", type=int, default=None, help="maximum words (default: decode.max_length)"
    )
    p.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help="largest width x height an image may declare (default: export.max_pixels)",
    )
    p.add_argument("--name", default=None, help="model name (default: export.model_name)")
    p.add_argument(
        "--format",
        default=None,
        help="export format: savedmodel, preset or litert (default: export.format, savedmodel)",
    )
    p.add_argument(
        "--precision",
        default=None,
        choices=("float32", "bfloat16", "auto"),
        help="the serving graph's compute precision (default: export.precision, float32); "
        "bfloat16 pays on CPUs with AVX512_BF16 or AMX and on GPUs of compute capability 8+",
    )
    p.add_argument(
        "--quantize",
        default=None,
        choices=("none", "float16", "int8"),
        help="--format litert: float16 or dynamic-range int8 weights (default: export.quantize, none)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="section.key=value",
        help="override the saved config's decode or export settings (repeatable)",
    )
    p.set_defaults(func=cmd_export, check=check_export)

    p = _command(
        sub,
        "serve",
        "development server with TF Serving's REST API (production: TF Serving)",
        (
            "keras-saat serve --workdir runs/shapes_soft",
            "keras-saat serve --model-base models/keras_saat --name keras_saat --port 8501",
        ),
    )
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--model-base", metavar="BASE", help="TF Serving model base")
    group.add_argument("--workdir", help="a trained workdir: export it, then serve it")
    group.add_argument("--preset", metavar="DIR", help="a preset folder: export it, then serve it")
    p.add_argument("--name", default="keras_saat", help="model name in URLs (default keras_saat)")
    p.add_argument("--port", type=int, default=8501, help="REST port (default 8501)")
    p.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--version", type=int, default=None, help="version (default: the highest)")
    p.add_argument(
        "--max-batch", type=int, default=64, help="images in one request, at most (default 64)"
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=32,
        help="connections served at once; one more is answered 503 (default 32)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        help="seconds a request has to arrive whole (default 30)",
    )
    p.set_defaults(func=cmd_serve, check=check_serve)

    p = _command(
        sub,
        "bench",
        "measure speed and memory against this machine's limit",
        ("keras-saat bench --part matmul", "keras-saat bench --json --out bench.json"),
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--part",
        action="append",
        default=[],
        help="matmul, train, batches, input, profile, extract, decode, serving, malloc, hostile "
        "or scale (repeatable; default all)",
    )
    p.add_argument(
        "--images",
        type=int,
        default=None,
        help="scale: images of the synthetic COCO- and CC3M-shaped datasets (default 10000)",
    )
    p.add_argument("--out", metavar="FILE.json", help="also write the report here")
    p.set_defaults(func=cmd_bench, check=check_bench)

    p = _command(
        sub,
        "demo",
        "generate Shapes, train a soft-attention captioner, show captions",
        ("keras-saat demo", "keras-saat demo --workdir runs/demo --set train.epochs=2"),
    )
    _experiment_arguments(p, None, config=False)
    p.add_argument("--workdir", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--show", type=int, default=6, help="test captions to print (default 6)")
    p.set_defaults(func=cmd_demo, check=check_experiment)
    return parser


# The training commands keep freed memory for the next step (keras_saat/runtime/memory.py); a
# server or a one-off command gives it back to the system instead.
MALLOC_TUNED_COMMANDS = (cmd_train, cmd_demo, cmd_extract_features)


def main(argv=None):
    argv, beam_args = split_beam_args(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if beam_args:
        args.beam_args = beam_args
    if not args.verbose:
        quiet_tensorflow_logs()
    from keras_saat.errors import KerasSaatError, out_of_memory

    try:
        if args.func in MALLOC_TUNED_COMMANDS:
            from keras_saat.runtime.memory import tune_malloc

            tune_malloc()  # before TensorFlow starts its threads (keras_saat/runtime/memory.py)
        if args.func in (cmd_train, cmd_demo):
            from keras_saat.runtime.cpu_kernels import prefer_onednn

            prefer_onednn()  # before TensorFlow reads it (keras_saat/runtime/cpu_kernels.py)
        args.check(args)  # before TensorFlow loads: a mistake is answered at once
        if not args.verbose and args.func not in WITHOUT_TENSORFLOW:
            import_tensorflow_quietly()
        args.func(args)
    except KerasSaatError as err:
        print(f"keras-saat: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("keras-saat: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # out of memory, from Python or TensorFlow's allocator
        if not out_of_memory(err) or args.verbose:
            raise
        print(f"keras-saat: error: {out_of_memory(err)}", file=sys.stderr)
        return 1
    return 0


def run():
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
