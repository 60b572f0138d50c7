"""The flags more than one command takes, each defined once with its one validator, so
`--beam-size` means the same everywhere. Nothing here imports TensorFlow."""

import argparse
from pathlib import Path

from keras_saat.errors import KerasSaatError


def version():
    """The installed distribution's version; the package's own when run from a checkout."""
    from importlib import metadata

    try:
        return metadata.version("keras-saat")
    except metadata.PackageNotFoundError:
        from keras_saat import __version__

        return __version__


class VersionAction(argparse.Action):
    """The program's --version: the version is looked up only when asked for."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"keras-saat {version()}")
        parser.exit()


def help_from(action, describe):
    """Gives an argparse `action` the help text `describe()`, computed only when the help is
    shown, so parsing imports no registry."""
    base = type(action)
    lazy = property(lambda self: describe(), lambda self, value: None)
    action.__class__ = type(f"Described{base.__name__}", (base,), {"help": lazy})
    return action


def count(text):
    """A whole number of at least 0 (`make-shapes --train 0`)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def examples(*lines):
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def command(sub, name, help, example_lines):
    """A sub-command with its Examples section and --verbose."""
    parser = sub.add_parser(
        name,
        help=help,
        description=help,
        epilog=examples(*example_lines),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbose_argument(parser, default=argparse.SUPPRESS)
    return parser


def verbose_argument(parser, default=False):
    # SUPPRESS on a command: the top-level --verbose (before the command) is not reset.
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=default,
        help="show TensorFlow's start-up and C++ log lines",
    )


def trained_model_arguments(parser, required=True, saved_model=False, model_base=False):
    """--workdir or --preset (or a SavedModel for `caption` and `serve`): the trained model."""
    group = parser.add_mutually_exclusive_group(required=required)
    if model_base:
        group.add_argument("--model-base", metavar="BASE", help="TF Serving model base")
    group.add_argument(
        "--workdir",
        help="a trained workdir (its best model and config), a .keras file (model.save, "
        "ModelCheckpoint) or a preset folder",
    )
    group.add_argument(
        "--preset",
        metavar="PRESET",
        help="a preset folder (Captioner.save_to_preset, or export --format preset); a "
        "workdir or a .keras file too",
    )
    if saved_model:
        group.add_argument(
            "--saved-model",
            metavar="BASE",
            help="with --runner: a `keras-saat export` model base or version folder "
            "(local or gs://)",
        )
    return group


def trained(args):
    """The TrainedModelPath `check_trained` left on `args`, else --workdir or --preset."""
    return getattr(args, "trained", None) or args.workdir or args.preset


def set_argument(parser):
    """--set KEY=VALUE, the one way every command overrides a config value."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set train.epochs=5 (repeatable)",
    )


def config_argument(parser, required=True, default_help=None):
    """--config FILE|RECIPE; `default_help` says what a command reads without it."""

    def recipes():
        from keras_saat.config_files import recipe_names

        names = ", ".join(recipe_names())
        text = f"YAML experiment config (see configs/), or a packaged recipe: {names}"
        return text + (f" (default: {default_help})" if default_help else "")

    help_from(parser.add_argument("--config", required=required), recipes)


def strict_argument(parser):
    parser.add_argument(
        "--strict", action="store_true", help="stop at the first unreadable image or bad caption"
    )


# Whole-number flags of at least 1, checked (`check_positive`) with the command's other checks.
POSITIVE = ("beam_size", "max_length", "batch_size", "shard_size")


def beam_size_argument(parser, default_help):
    parser.add_argument(
        "--beam-size", type=int, default=None, help=f"beam width (default: {default_help})"
    )


def max_length_argument(parser, default_help=None):
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="maximum words" + (f" (default: {default_help})" if default_help else ""),
    )


def max_pixels_argument(parser, default_help):
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help=f"largest width x height an image may declare (default: {default_help})",
    )


def batch_size_argument(parser, help, default=None, group=None):
    (group or parser).add_argument("--batch-size", type=int, default=default, help=help)


def check_positive(args):
    """The flags of `POSITIVE`, where given, are at least 1."""
    for name in POSITIVE:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise KerasSaatError(f"--{name.replace('_', '-')} {value}: give at least 1")


def model_version_argument(parser, help):
    """--model-version N: a SavedModel's version folder."""
    parser.add_argument(
        "--model-version", dest="version", metavar="N", type=int, default=None, help=help
    )


def runner_group(parser, runner_help, large_model_help):
    """--runner and --large-model; Beam's own options follow a `--` (`split_beam_args`)."""
    group = parser.add_argument_group(
        'Apache Beam (pip install "keras-saat[beam]"; Beam\'s own options after `--`)'
    )
    group.add_argument("--runner", metavar="NAME", help=runner_help)
    group.add_argument("--large-model", action="store_true", help=large_model_help)
    parser.set_defaults(beam_args=[])
    return group


def split_beam_args(argv):
    """(keras-saat's arguments, Beam's): Beam's follow the first `--` after --runner."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if not any(a == "--runner" or a.startswith("--runner=") for a in argv[:cut]):
        return argv, []
    return argv[:cut], argv[cut + 1 :]


def check_folder_argument(flag, path):
    """`flag`'s `path` is a folder, or not there yet."""
    if Path(path).exists() and not Path(path).is_dir():
        raise KerasSaatError(f"{flag} {path} is a file; give a folder")


def log(message):
    print(message, flush=True)
