"""Feature extraction throughput against the bare backbone forward, measured in one run.

    .venv/bin/python -m benchmarks.extract_throughput [--backbone efficientnetb0] [--images 256]

Writes JPEG files (Shapes scenes, upscaled to 256 px, as real photos come
larger than the backbone's input), then times on the same images and batches:
  bare:    the compiled encoder on pre-decoded, pre-resized pixels in memory;
  extract: `extract_features` end to end (read, decode, resize, encoder, write shards).
Prints images/s of both and their ratio (the target is 0.9 or more).
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

from keras_saat.data import read_karpathy  # noqa: E402
from keras_saat.data.feature_cache import compiled_encoder, extract_features  # noqa: E402
from keras_saat.data.images import decode_image  # noqa: E402
from keras_saat.data.shapes import reference_captions, render, sample_objects  # noqa: E402
from keras_saat.encoders import ImageEncoder  # noqa: E402


def write_jpegs(folder, count, seed=0):
    """A Karpathy-format dataset of `count` 256x256 JPEG scenes, all in the train split."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    images = []
    for i in range(count):
        objects = sample_objects(rng)
        pixels = Image.fromarray(render(objects, rng)).resize((256, 256), Image.BILINEAR)
        pixels.save(folder / "images" / f"{i:06d}.jpg", quality=90)
        captions = [{"raw": c} for c in reference_captions(objects)]
        images.append(
            {
                "filepath": "images",
                "filename": f"{i:06d}.jpg",
                "split": "train",
                "sentences": captions,
            }
        )
    for split in ("val", "test"):  # the reader wants all three splits; one image each
        images.append({**images[0], "split": split})
    (folder / "dataset.json").write_text(json.dumps({"dataset": "bench", "images": images}))
    return read_karpathy(folder / "dataset.json")


def measure(backbone, count, batch_size, shard_size):
    encoder = ImageEncoder(backbone)
    size = encoder.image_size
    with tempfile.TemporaryDirectory() as tmp:
        dataset = write_jpegs(Path(tmp), count)
        records = dataset.split("train")
        pixels = np.stack(
            [decode_image(tf.io.read_file(str(r.path)), size).numpy() for r in records]
        )
        encode = compiled_encoder(encoder, "float16")  # the function extraction uses
        encode(tf.constant(pixels[:batch_size]))  # trace and warm up

        def bare_forward():
            start = time.perf_counter()
            for i in range(0, count, batch_size):
                encode(tf.constant(pixels[i : i + batch_size])).numpy()
            return count / (time.perf_counter() - start)

        before = bare_forward()
        start = time.perf_counter()
        extract_features(
            encoder,
            dataset,
            Path(tmp) / "cache",
            splits=("train",),
            shard_size=shard_size,
            batch_size=batch_size,
            log=lambda _: None,
        )
        full = count / (time.perf_counter() - start)
        after = bare_forward()
        bare = (before + after) / 2  # the machine is shared: bracket the extraction
    return {
        "backbone": backbone,
        "images": count,
        "images_per_s": full,
        "bare_before": before,
        "bare_after": after,
        "bare_images_per_s": bare,
        "ratio": full / bare,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backbone",
        action="append",
        help="registry name (repeatable); default efficientnetb0, vgg16",
    )
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--shard-size", type=int, default=1000)
    args = parser.parse_args()
    for backbone in args.backbone or ["efficientnetb0", "vgg16"]:
        result = measure(backbone, args.images, args.batch_size, args.shard_size)
        print(
            f"{result['backbone']:>16}: extract {result['images_per_s']:.1f} img/s, bare forward "
            f"{result['bare_images_per_s']:.1f} img/s, ratio {result['ratio']:.3f} "
            f"({result['images']} images; bare {result['bare_before']:.1f} before, "
            f"{result['bare_after']:.1f} after)",
            flush=True,
        )


if __name__ == "__main__":
    main()
