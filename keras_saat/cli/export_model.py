"""`keras-saat export`: the best model as a SavedModel for TF Serving, a LiteRT file or
a preset folder. Each flag is a config override: the workdir's config is the one source."""

from keras_saat.cli.checks import check_trained
from keras_saat.cli.flags import (
    beam_size_argument,
    command,
    help_from,
    log,
    max_length_argument,
    max_pixels_argument,
    model_version_argument,
    set_argument,
    trained,
    trained_model_arguments,
)

INTERRUPTED = "nothing was exported (the unfinished version folder is removed)"


def add_parser(sub):
    p = command(
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
    trained_model_arguments(p)
    p.add_argument(
        "--out",
        required=True,
        metavar="BASE",
        help="TF Serving model base folder (--format preset: the preset folder; litert: "
        "the folder for NAME.tflite and vocab.txt)",
    )
    model_version_argument(p, "version folder (default: the next free one)")
    beam_size_argument(p, "decode.beam_size, 3")
    max_length_argument(p, "decode.max_length")
    max_pixels_argument(p, "export.max_pixels")
    p.add_argument("--name", default=None, help="model name (default: export.model_name)")
    help_from(p.add_argument("--format", default=None), _formats_help)
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
    set_argument(p)
    return p


def _formats_help():
    from keras_saat.export_formats import available_formats

    return f"export format: {', '.join(available_formats())} (default: export.format, savedmodel)"


def overrides(args):
    """--set, then each flag given as the config override it stands for."""
    flags = (
        ("decode.beam_size", args.beam_size),
        ("decode.max_length", args.max_length),
        ("export.max_pixels", args.max_pixels),
        ("export.model_name", args.name),
        ("export.format", args.format),
        ("export.precision", args.precision),
        ("export.quantize", args.quantize),
    )
    return [*args.set, *(f"{key}={value}" for key, value in flags if value is not None)]


def check(args):
    """The trained model, and the flags and --set as overrides of its config."""
    check_trained(args, overrides(args))


def run(args):
    import json

    from keras_saat.experiment import export_workdir
    from keras_saat.serving.signatures import METADATA_FILE

    path = export_workdir(trained(args), args.out, args.version, overrides(args), log=log)
    metadata = path / "assets.extra" / METADATA_FILE
    if metadata.is_file():  # a SavedModel version folder
        name = json.loads(metadata.read_text())["model_name"]
        log(
            f"serve it with TF Serving (see export/README.md), or for development:\n"
            f"  keras-saat serve --model-base {path.parent} --name {name}"
        )
