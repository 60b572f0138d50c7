"""The `keras-saat` command line: parse, check, then load TensorFlow and call the library.

One module per command (`COMMANDS`), each with `add_parser`, `check` and `run`. A
command's arguments, config, registry names and paths are checked before TensorFlow is
imported, so a mistake is answered in a fraction of a second. A command module may set
`TENSORFLOW = False`, `TUNE_MALLOC = True` or `PREFER_ONEDNN = True` (process settings
made before TensorFlow starts), and `INTERRUPTED`: what a stopped run keeps.
"""

import argparse
import sys

from keras_saat.cli import (
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
from keras_saat.errors import KerasSaatError, did_you_mean, out_of_memory, write_failure
from keras_saat.runtime.cpu_kernels import prefer_onednn
from keras_saat.runtime.interrupts import stop_on_signals
from keras_saat.runtime.memory import tune_malloc
from keras_saat.runtime.tf_logs import import_tensorflow_quietly, quiet_tensorflow_logs

# In the order `keras-saat --help` lists them.
COMMANDS = (make_shapes, extract_features, train, evaluate, caption, export_model, serve, demo)


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, naming the closest command, choice or flag to a mistyped one."""

    def _check_value(self, action, value):  # argparse's check of a value against `choices`
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as err:
            hint = did_you_mean(value, action.choices) if isinstance(value, str) else ""
            raise argparse.ArgumentError(action, err.message + hint) from None

    def parse_known_args(self, args=None, namespace=None):
        self.given = list(sys.argv[1:] if args is None else args)  # what `error` checks
        return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but the command an unknown flag was given to answers it."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(self, "commands", {}).get(getattr(namespace, "command", None), self)
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace

    def error(self, message):
        """argparse's error, naming a command's flag closest to one it does not know."""
        if not hasattr(self, "commands"):  # a command's parser: its flags are all it takes
            known = [s for action in self._actions for s in action.option_strings]
            given = [a.split("=", 1)[0] for a in getattr(self, "given", ()) if a.startswith("--")]
            for flag in (f for f in given if not any(k.startswith(f) for k in known)):
                if hint := did_you_mean(flag, known):  # ' (did you mean "--x"?)'
                    named = "" if flag in message else f" for {flag}"
                    message += hint.replace('"?)', f'"{named}?)')
                    break
        super().error(message)


def build_parser():
    parser = CommandParser(
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
    parser.commands = sub.choices  # name -> its parser: an unknown flag's suggestions
    return parser


def main(argv=None):
    argv, beam_args = split_beam_args(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if beam_args:
        args.beam_args = beam_args
    if not args.verbose:
        quiet_tensorflow_logs()
    command = args.module
    stop_on_signals()  # SIGTERM too: what schedulers send to stop a process
    try:
        if getattr(command, "TUNE_MALLOC", False):
            tune_malloc()  # before TensorFlow starts its threads
        if getattr(command, "PREFER_ONEDNN", False):
            prefer_onednn()  # before TensorFlow reads TF_ENABLE_ONEDNN_OPTS
        check_positive(args)
        command.check(args)  # before TensorFlow loads: a mistake is answered at once
        if not args.verbose and getattr(command, "TENSORFLOW", True):
            import_tensorflow_quietly()
        command.run(args)
    except KerasSaatError as err:
        print(f"keras-saat: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        signal_name = str(err) or "SIGINT"
        kept = f"; {command.INTERRUPTED}" if hasattr(command, "INTERRUPTED") else ""
        print(f"keras-saat: interrupted ({signal_name}){kept}", file=sys.stderr)
        return 143 if signal_name == "SIGTERM" else 130
    except Exception as err:  # a refused write, or out of memory, from Python or TensorFlow
        message = write_failure(err)
        if message and not args.verbose:
            print(f"keras-saat: error: {message}", file=sys.stderr)
            return 2
        if not out_of_memory(err) or args.verbose:
            raise
        print(f"keras-saat: error: {out_of_memory(err)}", file=sys.stderr)
        return 1
    return 0


def run():
    """Console-script entry point."""
    sys.exit(main())
