"""`keras-saat make-shapes`: render a Shapes world dataset (Karpathy split format)."""

import time

from keras_saat.cli.flags import check_folder_argument, command, count, log

TENSORFLOW = False  # the generator draws with NumPy and Pillow


def add_parser(sub):
    p = command(
        sub,
        "make-shapes",
        "render a Shapes world dataset (Karpathy split format)",
        (
            "keras-saat make-shapes --out data/shapes",
            "keras-saat make-shapes --out data/tiny --train 40 --val 8 --test 8 --seed 1",
        ),
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--train", type=count, default=2000, help="training images (default 2000)")
    p.add_argument("--val", type=count, default=200, help="validation images (default 200)")
    p.add_argument("--test", type=count, default=200, help="test images (default 200)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    return p


def check(args):
    """--out is a folder (or not there yet)."""
    check_folder_argument("--out", args.out)


def run(args):
    from keras_saat.data.shapes import write_shapes_dataset

    start = time.perf_counter()
    path = write_shapes_dataset(args.out, args.train, args.val, args.test, args.seed, log)
    log(
        f"wrote {args.train + args.val + args.test} images and {path} in {time.perf_counter() - start:.1f}s"
    )
