"""The checked zlib inflate of feature records (`cache_format.inflate`: each record's
length checked before and after) against TensorFlow's inflate alone: one pass of a
synthetic int8+zlib cache through `FeatureCache.dataset`, records a second.

    python -m benchmarks.zlib_inflate [--images 4000] [--rounds 2] [--out FILE.json]

The cache holds random 14x14x512 rows (the paper's grid; random values compress less
than a ReLU's, so each record's inflate is the larger share). The two inflates alternate,
`--rounds` times each, in one process, so the machine's state is shared.
"""

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.beam_caption import report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()
    import tensorflow as tf

    import keras_saat.data.feature_cache.cache_format as cache_format
    from keras_saat.data.feature_cache.feature_cache import FeatureCache
    from tests.support.synthetic_data import write_synthetic_cache

    folder = Path(tempfile.mkdtemp(prefix="zlib-inflate-"))
    size = {"locations": 196, "channels": 512}
    write_synthetic_cache(folder, args.images, size, dtype="int8", compression="zlib")
    cache = FeatureCache(folder)
    checked = cache_format.inflate
    inflates = {
        "checked (keras_saat inflate)": checked,
        "unchecked (tf.io.decode_compressed alone)": lambda data, _: tf.io.decode_compressed(
            data, compression_type="ZLIB"
        ),
    }
    rows = {name: [] for name in inflates}
    for _ in range(args.rounds):
        for name, inflate in inflates.items():
            cache_format.inflate = inflate  # decode_features looks it up at trace time
            start = time.perf_counter()
            count = sum(len(b["position"]) for b in cache.dataset("train").batch(64))
            rows[name].append(round(count / (time.perf_counter() - start), 1))
    cache_format.inflate = checked
    report(args.out, "zlib_inflate.py", images=args.images, records_per_s=rows)


if __name__ == "__main__":
    main()
