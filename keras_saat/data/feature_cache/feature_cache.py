"""The feature cache: the frozen backbone's output, computed once, in sharded TFRecords.

Layout of a cache folder:
    index.json                   what was extracted and how (fingerprints), and per shard
                                 its images' stamps and hash and what was skipped
    <split>-<i>-of-<n>.tfrecord  one tf.train.Example per image (`cache_format`)
    progress.jsonl               while an extraction runs or after it was killed: one
                                 JSON line per finished shard, folded into index.json
                                 when extraction ends

`FeatureCache` is the one reader of this layout; `extract_features` fills it.
"""

import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_saat.data.feature_cache.cache_format import (
    BAD_POSITION,
    RECORD_SPEC,
    checked,
    decode_features,
    record_bytes,
)
from keras_saat.data.feature_cache.cache_index import INDEX, read_index
from keras_saat.data.feature_cache.shard_checks import (
    check_shard,
    damaged_shard_error,
    read_error_reason,
)
from keras_saat.errors import KerasSaatError
from keras_saat.runtime.pipeline_options import without_autotune


class FeatureCache:
    """Reads a feature cache folder written by `extract_features`; a feature source
    (`keras_saat.data.pipeline.feature_source`) whose batches hold "features"."""

    streams = True  # an epoch reads every row from disk
    pads_partial_batches = True

    def __init__(self, directory):
        self.directory = Path(directory)
        if not (self.directory / INDEX).is_file():
            raise KerasSaatError(
                f"no feature cache in {self.directory}; run `keras-saat extract-features` first"
            )
        self.index = read_index(self.directory)
        self.grid_shape = tuple(self.index["grid"])
        self.num_locations = self.grid_shape[0] * self.grid_shape[1]
        self.channels = self.index["channels"]
        self.dtype = self.index["dtype"]
        self.compression = self.index.get("compression", "none")
        self._opened = {}  # shard path -> (mtime, size) when this reader first used it

    @property
    def cache(self):
        return self

    @property
    def splits(self):
        """The names of the splits the cache holds (complete or not)."""
        return tuple(self.index["splits"])

    def complete(self, split):
        return all(s["done"] for s in self.index["splits"][split]["shards"])

    def image_count(self, split):
        """The split's images, the unreadable ones (never written) included: its positions."""
        return self.index["splits"][split]["count"]

    def files(self, split):
        """The split's shard files, each checked to be whole and to be the file this reader
        used before, so a missing, truncated or meanwhile rewritten shard is named, not read."""
        if split not in self.index["splits"] or not self.complete(split):
            raise KerasSaatError(
                f"the feature cache in {self.directory} has no complete '{split}' split"
            )
        shards = self.index["splits"][split]["shards"]
        for shard in shards:
            path = self.directory / shard["file"]
            self._same_file(path)  # first: a rewrite of another size is not damage
            check_shard(path, shard.get("bytes"))
        return [str(self.directory / s["file"]) for s in shards]

    def _same_file(self, path):
        """Raises when `path`'s modification time or size is not the one this reader first saw
        (not its inode: some network and FUSE file systems renumber files)."""
        try:
            found = os.stat(path)
        except FileNotFoundError:
            return  # check_shard names it
        now = (found.st_mtime_ns, found.st_size)
        if self._opened.setdefault(str(path), now) != now:
            raise KerasSaatError(
                f"the feature cache shard {path} was replaced since this run first read it "
                "(its time or size changed: another run extracting this cache?); run this "
                "command again once that extraction has finished (a training run resumes "
                "where it stopped)"
            )

    def shard_files(self, splits):
        """The shard files of those of `splits` the cache holds."""
        return [
            path for split in splits if split in self.index["splits"] for path in self.files(split)
        ]

    def count(self, split):
        """The split's images written (readable)."""
        return sum(s["written"] for s in self.index["splits"][split]["shards"])

    def shard_positions(self, split, records=None):
        """Each shard's image positions in the order it holds them, from the index alone."""
        shards, start = [], 0
        for shard in self.index["splits"][split]["shards"]:
            covered = np.arange(start, start + shard["written"] + len(shard["skipped"]))
            skipped = np.asarray([int(p) for p, _ in shard["skipped"]], np.int64)
            shards.append(covered[~np.isin(covered, skipped)].astype(np.int32))
            start += len(covered)
        return shards

    def skipped(self, split):
        """[(position, reason), ...] of images that could not be read."""
        return [tuple(x) for s in self.index["splits"][split]["shards"] for x in s["skipped"]]

    def parse_fn(self, keep_dtype=False, count=None):
        """serialized tf.train.Example -> {"position": int32, "features": (L, C)}, float32 unless
        `keep_dtype`; with `count`, a position outside [0, count) is a damaged record."""
        shape = (self.num_locations, self.channels)
        out = None if keep_dtype else tf.float32

        def parse(serialized):
            example = tf.io.parse_single_example(serialized, RECORD_SPEC)
            features = decode_features(example, shape, self.dtype, self.compression, out)
            position = example["position"]
            if count is not None:
                inside = (position >= 0) & (position < count)
                position = checked(position, inside, BAD_POSITION.format(count=count))
            return {"position": tf.cast(position, tf.int32), "features": features}

        return parse

    def _interleaved(self, split, shuffle_files, seed, open_shard):
        """The split's shards, shuffled by `seed` when asked, read round-robin in a fixed order:
        one order for a seed, which an exact resume depends on."""
        files = self.files(split)
        names = tf.data.Dataset.from_tensor_slices((files, tf.range(len(files))))
        if shuffle_files:
            names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        return names.interleave(
            open_shard,
            cycle_length=min(4, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,  # a seeded order: exact resume depends on it
        )

    def dataset(self, split, shuffle_files=False, seed=None, keep_dtype=False):
        """tf.data of {"position": int32, "features": (L, C)} per image, float32 unless keep_dtype."""
        records = self._interleaved(
            split, shuffle_files, seed, lambda name, _: tf.data.TFRecordDataset(name)
        )
        parse = self.parse_fn(keep_dtype, count=self.image_count(split))
        return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)

    def read_shard(self, name, chunk=1024, count=None):
        """(positions (n,), features (n, L, C) in the cache dtype, int8 scales (n, C) or None)
        chunks of one shard file, in its order; with `count`, a stray position names the shard."""
        shape = (self.num_locations, self.channels)
        chunks = iter(tf.data.TFRecordDataset(name).batch(chunk).prefetch(1))
        while True:
            try:
                serialized = next(chunks, None)
            except tf.errors.DataLossError as err:
                raise damaged_shard_error(name, read_error_reason(err)) from None
            if serialized is None:
                return
            examples = tf.io.parse_example(serialized, RECORD_SPEC)
            found = examples["position"].numpy()
            if count is not None and len(found) and (found.min() < 0 or found.max() >= count):
                reason = f"a record's position is outside the {count} images of its split"
                raise damaged_shard_error(name, reason)
            positions = tf.cast(examples["position"], tf.int32)
            out = tf.int8 if self.dtype == "int8" else None
            try:
                decoded = decode_features(examples, shape, self.dtype, self.compression, out)
            except tf.errors.InvalidArgumentError as err:  # `decode_features`' checks
                size = record_bytes(shape, self.dtype)
                reason = f"a record does not hold the {size} bytes of one image's features"
                if "int8 channel scales" in err.message:
                    reason = "a record's int8 channel scales are not finite and >= 0"
                raise damaged_shard_error(name, reason) from None
            rows, scales = decoded if out is not None else (decoded, None)
            yield positions, rows, scales

    def load(self, split):
        """The whole split in memory, in position order: (positions (N,), features (N, L, C) float32)."""
        batches = list(self.dataset(split).batch(256).as_numpy_iterator())
        positions = np.concatenate([b["position"] for b in batches])
        order = np.argsort(positions)
        return positions[order], np.concatenate([b["features"] for b in batches])[order]

    def planned_batches(self, split, records, batches, windows, tokens, plan):
        """A window's shards read into memory at a time (the next one while this one's batches
        go), each batch gathered from them."""
        files = tf.constant(self.files(split))
        parse = self.parse_fn(keep_dtype=True)
        batch_splits = windows["window_batches"]
        shards = tf.RaggedTensor.from_row_splits(
            windows["window_shards"], windows["window_shard_splits"]
        )
        expected = tf.RaggedTensor.from_row_splits(
            windows["window_positions"], windows["window_position_splits"]
        )

        def load(window):
            names = tf.gather(files, shards[window])
            count = tf.size(expected[window], out_type=tf.int64)  # the window's records
            read = (
                tf.data.TFRecordDataset(names)
                .map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .batch(tf.maximum(count, 1))
                .take(1)
                .get_single_element()
            )
            check = tf.debugging.assert_equal(
                read["position"],
                expected[window],
                message=f"the feature cache in {self.directory} holds other {split} images "
                f"than its {INDEX} says; delete the folder to extract again",
            )
            with tf.control_dependencies([check]):
                return window, tf.identity(read["features"])  # (n, L, C)

        def gathered(window, rows):
            start, stop = batch_splits[window], batch_splits[window + 1]

            def batch(b):
                local = b["local"][: b["sizes"]] if plan.sliced else b["local"]
                return {
                    "features": tf.gather(rows, local),
                    "tokens": tokens(b["rows"], b["sizes"], b["widths"]),
                }

            window_batches = {k: v[start:stop] for k, v in batches.items()}
            return tf.data.Dataset.from_tensor_slices(window_batches).map(batch)

        numbers = tf.data.Dataset.range(tf.size(batch_splits, out_type=tf.int64) - 1)
        return numbers.map(load).prefetch(1).flat_map(gathered)

    def evaluation_batches(self, split, records, batch_size, positions=None):
        """Per-image batches for decoding: {"position", "features"}; only the images at
        `positions` (a list of int) when given. References stay with the records."""
        ds = self.dataset(split)
        if positions is not None:
            # A hash lookup: a subset of a large split costs one probe per example.
            keep = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(np.asarray(positions, np.int32)), tf.ones(len(positions), tf.int32)
                ),
                0,
            )
            ds = ds.filter(lambda example: keep.lookup(example["position"]) > 0)
        return without_autotune(ds.batch(batch_size).prefetch(tf.data.AUTOTUNE))
