"""What the hostile-input checks cost: the header walk against the decode it guards.

    python -m benchmarks.image_decoding [--repeats 15]

Prints one JSON object a line:
- `gif`: a GIF of random pixels at several sides (the worst case: one 255-byte
  sub-block after another), the time `decode_images` takes on it (header walk + decode
  + resize) against `tf.io.decode_image` alone;
- `batch`: 32 ordinary images (16 JPEG and 12 PNG at 640x480, 4 GIF at 320x240) through
  `decode_images` at 224, and the same bytes through bare `tf.io.decode_image` +
  `tf.image.resize`, medians of `--repeats` calls in one process.
"""

import argparse
import io
import json
import time

import numpy as np
import tensorflow as tf
from PIL import Image

from keras_saat.images.decoding import decode_images


def encode(fmt, width, height, rng, blocky=True):
    shape = (height // 8, width // 8, 3) if blocky else (height, width, 3)
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    if blocky:
        pixels = pixels.repeat(8, 0).repeat(8, 1)
    buffer = io.BytesIO()
    image = Image.fromarray(pixels)
    (image.convert("P") if fmt == "GIF" else image).save(buffer, fmt)
    return buffer.getvalue()


def median_seconds(function, repeats):
    function()  # trace and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    guarded = tf.function(lambda data: decode_images(data, 224)[0])

    @tf.function
    def bare(data):
        return tf.map_fn(
            lambda d: tf.image.resize(
                tf.io.decode_image(d, 3, expand_animations=False), (224, 224)
            ),
            data,
            fn_output_signature=tf.float32,
        )

    for side in (256, 1000, 2000):
        data = tf.constant([encode("GIF", side, side, rng, blocky=False)])
        guarded_s = median_seconds(lambda d=data: guarded(d).numpy(), args.repeats)
        decode_s = median_seconds(
            lambda d=data: tf.io.decode_image(d[0], 3, expand_animations=False).numpy(),
            args.repeats,
        )
        print(json.dumps({"gif": f"{side}x{side}", "bytes": len(data.numpy()[0]),
                          "decode_images_s": round(guarded_s, 4),
                          "decode_image_alone_s": round(decode_s, 4)}))  # fmt: skip
    batch = [encode("JPEG", 640, 480, rng) for _ in range(16)]
    batch += [encode("PNG", 640, 480, rng) for _ in range(12)]
    batch += [encode("GIF", 320, 240, rng) for _ in range(4)]
    data = tf.constant(batch)
    guarded_s = median_seconds(lambda: guarded(data).numpy(), args.repeats)
    bare_s = median_seconds(lambda: bare(data).numpy(), args.repeats)
    print(json.dumps({"batch": "16 JPEG + 12 PNG 640x480, 4 GIF 320x240, to 224",
                      "decode_images_ms": round(1000 * guarded_s, 1),
                      "bare_decode_resize_ms": round(1000 * bare_s, 1),
                      "ratio": round(guarded_s / bare_s, 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
