"""Feature extraction as a Beam pipeline against the one-process extractor, same cores.

    python -m benchmarks.beam_extract --count 400 \\
        [--out benchmarks/results/cpu-beam-extract-DATE.json]

Renders a Shapes set once (`count` train images, 8 val, 8 test; seed 11), then runs
`keras-saat extract-features` over it (the tests' default config: the random frozen
Shapes CNN, float16 cache, 100 images a shard), each way in a fresh process and workdir:
  single   the one-process extractor (tf.data decoding, a writer thread)
  beam-1   --runner local (FnApiRunner, in process)
  beam-2   the same with -- --direct_num_workers=2 --direct_running_mode=multi_processing
and reports wall time (start-up, dataset and encoder included), images/s, its ratio to
single, the peak resident memory of the process tree, and whether each cache holds
`single`'s index.json and, record for record, its positions and features.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.beam_caption import measured
from benchmarks.harness import benchmark_report

ROOT = Path(__file__).parents[1]


def same_cache(found, expected):
    """Whether two cache folders hold the same index.json and the same position and
    features in every record (the serialized bytes may differ: a tf.train.Example's
    feature map has no fixed field order across processes)."""
    import numpy as np

    from keras_saat.data.feature_cache.feature_cache import FeatureCache

    found, expected = FeatureCache(found), FeatureCache(expected)
    if found.index != expected.index:
        return False
    for split in expected.splits:
        for ours, theirs in zip(found.files(split), expected.files(split), strict=True):
            pairs = zip(found.read_shard(ours), expected.read_shard(theirs), strict=True)
            for (p, x, a), (q, y, b) in pairs:
                if not (np.array_equal(p, q) and np.array_equal(x.numpy(), y.numpy())):
                    return False
                if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                    return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()
    from keras_saat.data.shapes_dataset import write_shapes_dataset

    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    scratch = Path(tempfile.mkdtemp(prefix="beam-extract-"))
    try:
        write_shapes_dataset(scratch / "world", train=args.count, val=8, test=8, seed=11)
        cli = [sys.executable, "-m", "keras_saat.cli", "extract-features", "--config",
               str(ROOT / "tests" / "configs" / "defaults.yaml"),
               "--set", "data.dataset=karpathy",
               "--set", f"data.path={scratch / 'world' / 'dataset_shapes.json'}",
               "--set", "data.cache_shard_size=100"]  # fmt: skip
        beam = ["--runner", "local", "--batch-size", str(args.batch_size)]
        two = ["--", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
        runs = {
            "single": [*cli, "--workdir", str(scratch / "single")],
            "beam-1": [*cli, "--workdir", str(scratch / "beam-1"), *beam],
            "beam-2": [*cli, "--workdir", str(scratch / "beam-2"), *beam, *two],
        }
        images = args.count + 16
        rows = []
        for name, command in runs.items():
            seconds, peak = measured(command, env)
            rows.append(
                {
                    "run": name,
                    "images": images,
                    "seconds": round(seconds, 1),
                    "images_per_s": round(images / seconds, 1),
                    "peak_tree_rss_mb": round(peak),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        for row in rows:
            row["vs_single"] = round(row["images_per_s"] / rows[0]["images_per_s"], 2)
            row["same_cache"] = same_cache(
                scratch / row["run"] / "features", scratch / "single" / "features"
            )
        benchmark_report("beam_extract.py", {"rows": rows}, args.out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
