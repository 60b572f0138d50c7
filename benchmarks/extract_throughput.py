"""Feature extraction throughput against the bare backbone forward, measured in one run.

    .venv/bin/python -m benchmarks.extract_throughput [--backbone efficientnetb0] [--images 256]

Writes JPEG files (Shapes scenes, upscaled to 256 px, as real photos come
larger than the backbone's input), then times on the same images and batches:
  bare:    the compiled encoder on pre-decoded, pre-resized pixels in memory;
  extract: `extract_features` end to end (read, decode, resize, encoder, write shards).
Prints images/s of both and their ratio (the target is 0.9 or more). The same
measurement is the `extract` part of `python -m benchmarks` (`benchmarks.harness`).
"""

import argparse

from benchmarks.harness.pipelines import measure_extraction


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
        result = measure_extraction(backbone, args.images, args.batch_size, args.shard_size)
        print(
            f"{result['backbone']:>16}: extract {result['images_per_s']:.1f} img/s, bare forward "
            f"{result['bare_images_per_s']:.1f} img/s, ratio {result['ratio']:.3f} "
            f"({result['images']} images; bare {result['bare_before']:.1f} before, "
            f"{result['bare_after']:.1f} after)",
            flush=True,
        )


if __name__ == "__main__":
    main()
