"""Synthetic datasets for tests and the bench: feature caches of random rows in
extraction's layout, and captions files at COCO's and CC3M's shape.

    records = write_synthetic_cache(folder, 1000, SIZES["paper"])
    write_cache(folder, dataset)   # every split of a dataset, 14x14x512 float16
"""

import csv
from pathlib import Path

import numpy as np

SHAPES = {"coco": {"captions": 5, "words": 10_000}, "cc3m": {"captions": 1, "words": 30_000}}

SHARD_SIZE = 1000  # images a shard of the synthetic cache, as extraction's default


def write_synthetic_cache(
    folder,
    images,
    size,
    captions_per_image=5,
    seed=0,
    shard_size=1000,
    skip=(),
    dtype="float16",
    compression="none",
):
    """A feature cache of `images` random (L, C) rows of `size` in the format `dtype` /
    `compression` (float16 by default), in shards of `shard_size` as extraction writes
    them (the positions in `skip` left out, as unreadable images are), and records with
    Shapes captions: the input bench's data."""
    import numpy as np
    import tensorflow as tf

    from keras_saat.data.feature_cache.cache_format import feature_example
    from keras_saat.data.feature_cache.cache_index import (
        UNDECODABLE,
        new_index,
        set_split,
        shard_file,
        write_index,
    )
    from keras_saat.data.readers.caption_dataset import ImageRecord
    from keras_saat.data.shapes import reference_captions, sample_objects

    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    side = int(round(size["locations"] ** 0.5))
    shards, count = [], max(1, -(-images // shard_size))
    for first in range(0, images, shard_size):
        name = shard_file("train", len(shards), count)
        everything = range(first, min(first + shard_size, images))
        positions = [p for p in everything if p not in skip]
        with tf.io.TFRecordWriter(str(folder / name)) as writer:
            for position in positions:
                row = rng.standard_normal((size["locations"], size["channels"]), np.float32)
                writer.write(feature_example(position, row, dtype, compression))
        skipped = [[p, UNDECODABLE] for p in everything if p in skip]
        shards.append({"file": name, "done": True, "written": len(positions), "skipped": skipped})
    header = {"grid": [side, side], "channels": size["channels"], "dtype": dtype}
    index = new_index({**header, "compression": compression})
    set_split(index, "train", images, shard_size, shards)
    write_index(folder, index)
    records = []
    for position in range(images):
        captions = reference_captions(sample_objects(rng))[:captions_per_image]
        records.append(ImageRecord(position, None, "train", captions))
    return records


def _zipf_words(rng, vocabulary, count):
    """`count` word indices drawn from a Zipf law (s = 1) over `vocabulary` words."""
    weights = 1.0 / np.arange(1, vocabulary + 1)
    return rng.choice(vocabulary, size=count, p=weights / weights.sum())


def write_captions_file(folder, images, shape, seed=0):
    """A captions CSV of `images` images (train 90 %, val and test 5 % each), its image
    files empty. Returns its path."""
    rng = np.random.default_rng(seed)
    per_image, words = SHAPES[shape]["captions"], SHAPES[shape]["words"]
    (folder / "images").mkdir(parents=True, exist_ok=True)
    lengths = rng.integers(8, 15, size=images * per_image)
    drawn = iter(_zipf_words(rng, words, int(lengths.sum())))
    path = folder / "captions.csv"
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(("image", "caption", "split"))
        row = 0
        for i in range(images):
            name = f"images/{i:08d}.jpg"
            (folder / name).touch()
            split = "train" if i % 20 < 18 else ("val" if i % 20 == 18 else "test")
            for _ in range(per_image):
                caption = " ".join(f"w{next(drawn)}" for _ in range(lengths[row]))
                writer.writerow((name, caption, split))
                row += 1
    return path


def write_cache(folder, dataset, seed=0, shard_size=SHARD_SIZE):
    """A feature cache of every split of `dataset`: 14x14x512 float16 rows, in
    extraction's layout."""
    import tensorflow as tf

    from keras_saat.data.feature_cache.cache_format import feature_example
    from keras_saat.data.feature_cache.cache_index import (
        new_index,
        set_split,
        shard_file,
        write_index,
    )

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    row = rng.standard_normal((196, 512)).astype(np.float16)  # one row: the contents do not matter
    index = new_index({"grid": [14, 14], "channels": 512, "dtype": "float16"})
    for split in ("train", "val", "test"):
        count = len(dataset.split(split))
        shards = max(1, -(-count // shard_size))
        entries = []
        for number in range(shards):
            name = shard_file(split, number, shards)
            positions = range(number * shard_size, min(count, (number + 1) * shard_size))
            with tf.io.TFRecordWriter(str(folder / name)) as writer:
                for position in positions:
                    writer.write(feature_example(position, row))
            entries.append(
                {
                    "file": name,
                    "done": True,
                    "written": len(positions),
                    "skipped": [],
                    "bytes": (folder / name).stat().st_size,
                }
            )
        set_split(index, split, count, shard_size, entries)
    write_index(folder, index)
