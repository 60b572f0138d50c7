"""`keras-saat bench`: speed and memory against this machine's limit (`keras_saat.bench`)."""

from keras_saat.cli.flags import command, help_from, log
from keras_saat.errors import KerasSaatError


def add_parser(sub):
    p = command(
        sub,
        "bench",
        "measure speed and memory against this machine's limit",
        ("keras-saat bench --part matmul", "keras-saat bench --json --out bench.json"),
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    help_from(p.add_argument("--part", action="append", default=[]), _parts_help)
    p.add_argument(
        "--images",
        type=int,
        default=None,
        help="scale: images of the synthetic COCO- and CC3M-shaped datasets (default 10000)",
    )
    p.add_argument("--out", metavar="FILE.json", help="also write the report here")
    return p


def _parts_help():
    from keras_saat.bench import PARTS

    *first, last = PARTS.names()
    return f"{', '.join(first)} or {last} (repeatable; default all)"


def check(args):
    """The --part names, and --images in range."""
    from keras_saat.bench import PARTS

    for name in args.part:
        PARTS.get(name)  # an unknown part names the nearest one
    if args.images is not None and not 1 <= args.images <= 100_000_000:
        raise KerasSaatError(f"--images {args.images}: give a count from 1 to 100000000")


def run(args):
    import json

    from keras_saat.bench import run_all, write_report

    report = run_all(
        args.part or None,
        log=(lambda _: None) if args.json else log,
        options={"images": args.images},
    )
    if args.out:
        write_report(report, args.out)
    if args.json:
        print(json.dumps(report))
