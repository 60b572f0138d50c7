"""The cost of each `Captioner.generate` call over image files, after the first.

    python -m benchmarks.generate_calls [--calls 5] [--images 8] [--out FILE.json]

One process, the demo's Captioner (untrained, `shapes_cnn_small_norm`, soft attention)
and IMAGES rendered Shapes scenes written as PNG files. Rows, each CALLS times in turn:
"pipeline" reads and decodes the files through a new tf.data pipeline a call
(`from_generator`, a map of `decode_images`, `prefetch(1)`), as `generate` once did;
"reader" through `ImagePreprocessor.rows` (the batch decoder traced once a process, a
worker thread a batch ahead); "generate" is the whole `model.generate(paths)`, greedy.
The first call of each holds the traces.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.harness import benchmark_report  # noqa: E402
from benchmarks.harness.runner import machine  # noqa: E402
from keras_saat import Captioner, Vocabulary  # noqa: E402
from keras_saat.data.shapes import render, sample_objects, vocabulary_words  # noqa: E402
from keras_saat.images.decoding import decode_images  # noqa: E402
from keras_saat.images.image_files import encoded_images  # noqa: E402
from keras_saat.models.preprocessor import ImagePreprocessor  # noqa: E402


def pipeline(paths, size):
    """A tf.data pipeline a call, as `generate` read files before the batch decoder."""

    def read():
        yield tuple(list(column) for column in zip(*encoded_images(paths), strict=True))

    text = tf.TensorSpec((None,), tf.string)
    files = tf.data.Dataset.from_generator(read, output_signature=(text, text, text))
    return files.map(lambda name, data, error: decode_images(data, size)).prefetch(1)


def timed(run):
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--out", help="write the rows here (JSON)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    paths = []
    for k in range(args.images):
        paths.append(str(folder / f"{k:03d}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(render(sample_objects(rng), rng)))
    vocabulary = Vocabulary.build([vocabulary_words()])
    model = Captioner(vocabulary.words, backbone="shapes_cnn_small_norm", feature_dim=128,
                      embedding_dim=64, lstm_units=256, attention="soft", dropout=0.3,
                      location_embedding=True, seed=0)  # fmt: skip
    reader = ImagePreprocessor(model.image_size)
    rows = {
        "pipeline": lambda: [b[0].numpy() for b in pipeline(paths, model.image_size)],
        "reader": lambda: [b["pixels"].numpy() for b in reader.rows(paths, 64)],
        "generate": lambda: model.generate(paths, beam_size=1),
    }
    result = [
        {"row": name, "call": call + 1, "seconds": timed(run)}
        for name, run in rows.items()
        for call in range(args.calls)
    ]
    where = machine()
    print(f"{where['cpu']} ({where['cpus']} cpus), {where['date']}, {args.images} files:")
    for name in rows:
        seconds = [f"{r['seconds']:.2f}" for r in result if r["row"] == name]
        print(f"  {name}: {', '.join(seconds)} s")
    benchmark_report("generate_calls.py", {"rows": result}, args.out)


if __name__ == "__main__":
    main()
