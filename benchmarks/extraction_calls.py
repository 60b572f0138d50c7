"""The cost of each feature extraction in one process, the first and those after it.

    python -m benchmarks.extraction_calls [--calls 3] [--train 40] [--shard-size 1000] [--out FILE.json]

One process writes a Shapes world (TRAIN training images, a fifth as many each for val and
test) and extracts its features CALLS times with the demo's backbone
(`shapes_cnn_small_norm`, random weights: the cost, not the features, is measured), each
time into a new cache: three splits, ceil(images / SHARD_SIZE) shards each. The first
call holds the traces; the later ones are what a process pays again for each run it
makes (the test suite, a notebook, a script that trains several models), and what each
shard costs beyond its images.
"""

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

import keras_saat  # noqa: E402
from benchmarks.harness import benchmark_report  # noqa: E402
from benchmarks.harness.runner import machine  # noqa: E402
from keras_saat.data import read_karpathy  # noqa: E402
from keras_saat.data.feature_cache.feature_extraction import extract_features  # noqa: E402
from keras_saat.data.shapes_dataset import write_shapes_dataset  # noqa: E402
from keras_saat.encoders import ImageEncoder  # noqa: E402


def library_commit():
    """The git commit of the keras_saat this process imported ("and local changes" when its
    tree differs; None outside a clone): run it from two checkouts to compare them."""
    folder = Path(keras_saat.__file__).parent

    def git(*args):
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--", "."):
        commit += " and local changes"
    return commit


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--train", type=int, default=40)
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--out", help="write the rows here (JSON)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    others = max(1, args.train // 5)
    write_shapes_dataset(folder / "data", train=args.train, val=others, test=others, seed=7)
    dataset = read_karpathy(folder / "data" / "dataset_shapes.json")
    keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn_small_norm", 128)
    rows = []
    for call in range(args.calls):
        start = time.perf_counter()
        extract_features(
            encoder,
            dataset,
            folder / f"cache{call}",
            shard_size=args.shard_size,
            log=lambda _: None,
        )
        rows.append({"call": call + 1, "seconds": time.perf_counter() - start})
    where = machine()
    images = args.train + 2 * others
    print(
        f"{where['cpu']} ({where['cpus']} cpus), {where['date']}, {images} images, "
        f"shards of {args.shard_size}, keras_saat {library_commit()}: "
        + ", ".join(f"{r['seconds']:.2f}" for r in rows)
        + " s"
    )
    settings = {"images": images, "shard_size": args.shard_size, "keras_saat": library_commit()}
    benchmark_report("extraction_calls.py", {"settings": settings, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
