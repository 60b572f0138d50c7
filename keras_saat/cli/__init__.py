"""The `keras-saat` command line: parse, check, then load TensorFlow and call the library.

One module per command (`COMMANDS`), each with `add_parser(subparsers)`, `check(args)`
and `run(args)`; the flags several commands take are defined once in `flags`. A
command's arguments, config, registry names and input paths are checked before
TensorFlow is imported, so a mistake is answered in a fraction of a second; nothing the
parser imports loads TensorFlow. A command module may say `TENSORFLOW = False` (it never
loads it), `TUNE_MALLOC = True` and `PREFER_ONEDNN = True` (process settings made before
TensorFlow starts: keras_saat/runtime/memory.py, cpu_kernels.py).
"""

import argparse
import sys

from keras_saat.cli import (
    bench,
    caption,
    demo,
    evaluate,
    export_model,
    extract_features,
    make_shapes,
    serve,
    train,
)
from keras_saat.cli.flags import (
    VersionAction,
    check_positive,
    examples,
    split_beam_args,
    verbose_argument,
)
from keras_saat.runtime.tf_logs import import_tensorflow_quietly, quiet_tensorflow_logs

# In the order `keras-saat --help` lists them.
COMMANDS = (
    make_shapes,
    extract_features,
    train,
    evaluate,
    caption,
    export_model,
    serve,
    bench,
    demo,
)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-saat",
        description="Show, Attend and Tell (Xu et al., 2015) with Keras 3 / TensorFlow.",
        epilog=examples(
            "keras-saat demo",
            "keras-saat train --config shapes_soft --workdir runs/shapes_soft",
            "keras-saat caption --workdir runs/shapes_soft photos/",
            "keras-saat COMMAND --help",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    verbose_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub).set_defaults(module=module)
    return parser


def main(argv=None):
    argv, beam_args = split_beam_args(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if beam_args:
        args.beam_args = beam_args
    if not args.verbose:
        quiet_tensorflow_logs()
    from keras_saat.errors import KerasSaatError, out_of_memory

    command = args.module
    try:
        if getattr(command, "TUNE_MALLOC", False):
            from keras_saat.runtime.memory import tune_malloc

            tune_malloc()  # before TensorFlow starts its threads (keras_saat/runtime/memory.py)
        if getattr(command, "PREFER_ONEDNN", False):
            from keras_saat.runtime.cpu_kernels import prefer_onednn

            prefer_onednn()  # before TensorFlow reads it (keras_saat/runtime/cpu_kernels.py)
        check_positive(args)
        command.check(args)  # before TensorFlow loads: a mistake is answered at once
        if not args.verbose and getattr(command, "TENSORFLOW", True):
            import_tensorflow_quietly()
        command.run(args)
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
