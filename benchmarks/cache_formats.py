"""Feature cache formats: bytes a image, load speed, and test BLEU-4 trained from each.

    python -m benchmarks.cache_formats [--workdir runs/cache_formats] [--seeds 0,1,2]
        [--recipe shapes_soft] [--out benchmarks/results/cpu-cache-formats-DATE.json]

1. `keras-saat extract-features --config RECIPE` once in WORKDIR/base (renders the Shapes
   world, pre-trains the Shapes CNN with seed 0); every run below reuses its images and
   frozen backbone, so the formats differ in the cache alone.
2. Each format's cache of the base's images: bytes a image from the shard files on disk
   (records, framing and scales included), and images/s of one pass of the train split
   through `FeatureCache.dataset` (parse, decompress, dequantise; the files in the page
   cache: the parse's speed, what a disk must beat to be the limit).
3. The same at the paper's grid size: the frozen ImageNet EfficientNet-Lite0 at 224
   (14x14x672, its block-6a expansion) over the test split's scenes, when its weights load.
4. `keras-saat train --config RECIPE --set data.cache_dtype=D --set
   data.cache_compression=Z --set model.seed=S --set train.seed=S` for the trained formats
   and seeds; test BLEU-4 from eval/test/metrics.json, and the mean difference to float16.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import benchmark_report

HERE = Path(__file__).resolve().parent
SIZED = ("float32", "none"), ("float16", "none"), ("float16", "zlib"), ("int8", "none")
SIZED += (("int8", "zlib"),)
TRAINED = ("float16", "none"), ("int8", "zlib")


def _cli(*args, log):
    command = [sys.executable, "-m", "keras_saat.cli", *args]
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT)


def measure_cache(folder, split="train", passes=3):
    """{"bytes_per_image", "images", "load_images_per_s"} of one cache folder (the best of
    `passes` passes over `split`, rows as the input pipeline hands them on)."""
    from keras_saat.data.feature_cache.feature_cache import FeatureCache

    cache = FeatureCache(folder)
    count = sum(cache.count(s) for s in cache.splits)
    size = sum(os.path.getsize(f) for s in cache.splits for f in cache.files(s))
    best = 0.0
    for _ in range(passes):
        start, seen = time.perf_counter(), 0
        for batch in cache.dataset(split, keep_dtype=True).batch(256):
            seen += int(batch["features"].shape[0])
        best = max(best, seen / (time.perf_counter() - start))
    return {
        "format": cache.dtype + ("" if cache.compression == "none" else "+" + cache.compression),
        "grid": [*cache.grid_shape, cache.channels],
        "images": count,
        "bytes_per_image": round(size / count, 1),
        "load_images_per_s": round(best),
    }


def extract_formats(encoder, dataset, root, splits, resize):
    """Each format of SIZED extracted into root/<format> and measured."""
    from keras_saat.data.feature_cache.feature_extraction import extract_features

    rows = []
    for dtype, compression in SIZED:
        folder = root / (dtype if compression == "none" else f"{dtype}+{compression}")
        shutil.rmtree(folder, ignore_errors=True)
        extract_features(
            encoder,
            dataset,
            folder,
            splits=splits,
            dtype=dtype,
            compression=compression,
            resize=resize,
            log=lambda _: None,
        )
        rows.append(measure_cache(folder, split=splits[0]))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def sizes(base, recipe, root):
    """The SIZED formats of the recipe's backbone and of EfficientNet-Lite0 at 224."""
    from keras_saat.config import load_config
    from keras_saat.encoders import ImageEncoder
    from keras_saat.experiment.preparation import load_dataset

    config = load_config(recipe)
    dataset = load_dataset(config, base, log=lambda _: None)
    model = config.model
    weights = str(base / "backbone.weights.h5")
    encoder = ImageEncoder(model.backbone, model.image_size or None, weights=weights)
    out = {"recipe": extract_formats(encoder, dataset, root / "recipe", ("train",), "crop")}
    try:
        lite0 = ImageEncoder("efficientnet_lite0", 224, weights="imagenet")
    except Exception as err:  # no converted weights here: the paper-size row is left out
        out["efficientnet_lite0_224"] = f"not measured: {err}"
    else:
        out["efficientnet_lite0_224"] = extract_formats(
            lite0, dataset, root / "lite0", ("test",), "crop"
        )
    return out


def bleu4(workdir):
    metrics = json.loads((workdir / "eval" / "test" / "metrics.json").read_text())
    return round(100 * metrics["bleu_4"], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/cache_formats")
    parser.add_argument("--recipe", default="shapes_soft")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--skip-train", action="store_true", help="sizes and load speed only")
    parser.add_argument(
        "--out",
        default=str(HERE / "results" / f"cpu-cache-formats-{time.strftime('%Y-%m-%d')}.json"),
    )
    args = parser.parse_args()
    root = Path(args.workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "runs.log"
    base = root / "base"
    if not (base / "backbone.weights.h5").is_file():
        _cli("extract-features", "--config", args.recipe, "--workdir", str(base), log=log)
    result = {
        "recipe": args.recipe,
        "formats": sizes(base, args.recipe, root / "sizes"),
        "runs": [],
    }
    seeds = [int(s) for s in args.seeds.split(",")] if not args.skip_train else []
    for seed in seeds:
        for dtype, compression in TRAINED:
            name = f"{dtype}+{compression}" if compression != "none" else dtype
            workdir = root / f"{name}-s{seed}"
            if not (workdir / "eval" / "test" / "metrics.json").is_file():
                shutil.rmtree(workdir, ignore_errors=True)
                workdir.mkdir(parents=True)
                (workdir / "data").symlink_to(base / "data")
                shutil.copy(base / "backbone.weights.h5", workdir / "backbone.weights.h5")
                start = time.perf_counter()
                _cli(
                    "train",
                    "--config",
                    args.recipe,
                    "--workdir",
                    str(workdir),
                    "--set",
                    f"data.cache_dtype={dtype}",
                    "--set",
                    f"data.cache_compression={compression}",
                    "--set",
                    f"model.seed={seed}",
                    "--set",
                    f"train.seed={seed}",
                    log=log,
                )
                seconds = round(time.perf_counter() - start)
                (workdir / "seconds.txt").write_text(str(seconds))
            else:  # trained by an earlier invocation
                timed = workdir / "seconds.txt"
                seconds = int(timed.read_text()) if timed.is_file() else None
            run = {"format": name, "seed": seed, "test_bleu_4": bleu4(workdir), "seconds": seconds}
            result["runs"].append(run)
            print(json.dumps(run), flush=True)
    by = {}
    for run in result["runs"]:
        by.setdefault(run["seed"], {})[run["format"]] = run["test_bleu_4"]
    diffs = [v["int8+zlib"] - v["float16"] for v in by.values() if len(v) == 2]
    if diffs:
        result["int8_minus_float16_bleu_4"] = {
            "per_seed": [round(d, 2) for d in diffs],
            "mean": round(sum(diffs) / len(diffs), 2),
        }
    benchmark_report("cache_formats.py", result, args.out)


if __name__ == "__main__":
    main()
