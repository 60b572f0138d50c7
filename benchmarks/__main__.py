"""`python -m benchmarks`: speed and memory against this machine's limit, every part of
the harness (`benchmarks.harness`) or the ones named, from the repository's root.

    python -m benchmarks --part matmul
    python -m benchmarks --json --out bench.json
"""

import argparse
import json
import sys

from benchmarks.harness import PARTS, run_all, write_report
from keras_saat.errors import KerasSaatError


def build_parser():
    *first, last = PARTS.names()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="measure speed and memory against this machine's limit",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object, not a log")
    parser.add_argument(
        "--part",
        action="append",
        default=[],
        help=f"{', '.join(first)} or {last} (repeatable; default all)",
    )
    parser.add_argument(
        "--images",
        type=int,
        default=None,
        help="scale: images of the synthetic COCO- and CC3M-shaped datasets (default 10000)",
    )
    parser.add_argument("--out", metavar="FILE.json", help="also write the report here")
    return parser


def check(args):
    """The --part names, and --images in range."""
    for name in args.part:
        PARTS.get(name)  # an unknown part names the nearest one
    if args.images is not None and not 1 <= args.images <= 100_000_000:
        raise KerasSaatError(f"--images {args.images}: give a count from 1 to 100000000")


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        check(args)
    except KerasSaatError as err:
        print(f"python -m benchmarks: error: {err}", file=sys.stderr)
        return 2
    report = run_all(
        args.part or None,
        log=(lambda _: None) if args.json else _log,
        options={"images": args.images},
    )
    if args.out:
        write_report(report, args.out)
    if args.json:
        print(json.dumps(report))
    return 0


def _log(line):
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
