"""`keras-saat make-shapes`: render a Shapes world dataset (Karpathy split format)."""

import json
import time

from keras_saat.cli.flags import check_folder_argument, command, count, log
from keras_saat.errors import KerasSaatError

# The generator draws with NumPy and Pillow; only --varied's Keras layers load TensorFlow.
TENSORFLOW = False


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
    p.add_argument(
        "--varied",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="share of the training scenes drawn on a random page under varied light, "
        "0-1 (default 0: the world's photometry; loads TensorFlow when above 0)",
    )
    p.add_argument(
        "--varied-copies",
        action="store_true",
        help="add each varied view as a training image of its own beside the world's scene "
        "(same captions) rather than in its place",
    )
    return p


def check(args):
    """--out is a folder (or not there yet); --varied is a share."""
    check_folder_argument("--out", args.out)
    if not 0.0 <= args.varied <= 1.0:
        raise KerasSaatError(f"--varied {args.varied}: give a share of the training scenes, 0 to 1")


def run(args):
    from keras_saat.data.shapes_dataset import write_shapes_dataset

    if args.varied and not args.verbose:
        from keras_saat.runtime.tf_logs import import_tensorflow_quietly

        import_tensorflow_quietly()

    start = time.perf_counter()
    path = write_shapes_dataset(
        args.out, args.train, args.val, args.test, args.seed, log,
        varied=args.varied, varied_copies=args.varied_copies,
    )  # fmt: skip
    written = len(json.loads(path.read_text())["images"])  # varied copies included
    log(f"wrote {written} images and {path} in {time.perf_counter() - start:.1f}s")
