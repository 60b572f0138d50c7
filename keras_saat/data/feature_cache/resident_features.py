"""A split's cached features held in the device's memory, gathered by the train step.

Streaming copies every caption's (L, C) features to the device each step, which a GPU
outpaces. `ResidentFeatures` reads the cache once into an (N, L, C) variable per replica
(an int8 cache stays int8 beside its scales); batches carry an int32 "image_index" that
the trainer gathers (`Trainer(resident=...)`). Batches follow the streamed path's epoch
plan, so a run trains to the same weights either way and resumes exactly.
"""

import numpy as np
import tensorflow as tf

from keras_saat.data.feature_cache.cache_index import INDEX
from keras_saat.errors import KerasSaatError


def resident_dtype(cache_dtype, compute_dtype):
    """The dtype the rows are held in: an int8 cache's int8, the compute dtype under mixed
    precision (what the model casts to anyway), else the cache's."""
    if tf.as_dtype(cache_dtype) == tf.int8:
        return tf.int8
    if tf.as_dtype(compute_dtype) != tf.float32:
        return tf.as_dtype(compute_dtype)
    return tf.as_dtype(cache_dtype)


def resident_bytes(cache, split, dtype):
    """The device memory a split's rows take in `dtype` (int8 adds the channel scales)."""
    count = cache.image_count(split)
    scales = cache.channels * 2 if tf.as_dtype(dtype) == tf.int8 else 0
    return count * (cache.num_locations * cache.channels * tf.as_dtype(dtype).size + scales)


class ResidentFeatures:
    """One split of a FeatureCache in device memory, as a (N, L, C) variable; a feature
    source whose batches hold "image_index". Row i is the image at position i of the split;
    skipped images keep a zero row and never appear in a batch.

    Args:
        cache: FeatureCache.
        split: str. Defaults to "train".
        dtype: str or tf.DType. Defaults to the cache's dtype. int8 needs an int8 cache;
            a float dtype over an int8 cache holds the dequantised rows.
        strategy: tf.distribute.Strategy whose replicas each hold a copy. Defaults to the
            current one.
        chunk: int. Images copied to the device at a time. Defaults to 1024.
    """

    streams = False  # read from the cache once, when the table is filled
    pads_partial_batches = True

    def __init__(self, cache, split="train", dtype=None, strategy=None, chunk=1024):
        self.cache, self.split = cache, split
        self.dtype = tf.as_dtype(dtype or cache.dtype)
        self.count = cache.image_count(split)
        quantized = self.dtype == tf.int8
        if quantized and cache.dtype != "int8":
            raise KerasSaatError(
                f"int8 resident features need an int8 cache; {cache.directory} holds {cache.dtype}"
            )
        shape = (self.count, cache.num_locations, cache.channels)
        strategy = strategy or tf.distribute.get_strategy()
        with strategy.scope():
            self.table = tf.Variable(
                lambda: tf.zeros(shape, self.dtype), trainable=False, name="resident_features"
            )
            scales = (self.count, cache.channels)
            self.scales = None
            if quantized:
                self.scales = tf.Variable(
                    lambda: tf.zeros(scales, tf.float16), trainable=False, name="resident_scales"
                )
        self._shard_positions = []
        for name in cache.files(split):
            positions = [np.zeros(0, np.int32)]
            for index, rows, scales in cache.read_shard(name, chunk, count=self.count):
                if quantized:
                    self.scales.scatter_update(tf.IndexedSlices(scales, index))
                elif scales is not None:  # dequantised once, here
                    rows = tf.cast(rows, tf.float32) * tf.cast(scales, tf.float32)[:, None, :]
                if rows.dtype != self.dtype:
                    rows = tf.cast(tf.cast(rows, tf.float32), self.dtype)  # as the model casts
                self.table.scatter_update(tf.IndexedSlices(rows, index))
                positions.append(index.numpy())
            self._shard_positions.append(np.concatenate(positions))
        if sum(len(p) for p in self._shard_positions) != cache.count(split):
            raise KerasSaatError(
                f"the feature cache in {cache.directory} holds another number of '{split}' "
                f"images than its {INDEX} says; delete the folder to extract again"
            )

    @property
    def nbytes(self):
        return resident_bytes(self.cache, self.split, self.dtype)

    @property
    def device(self):
        return self.table.device

    def gather(self, image_index):
        """(...) int32 indices -> (..., L, C) rows on the reading device (int8 dequantised to float16)."""
        rows = tf.gather(self.table, image_index)
        if self.scales is None:
            return rows
        scales = tf.cast(tf.gather(self.scales, image_index), tf.float32)
        return tf.cast(tf.cast(rows, tf.float32) * scales[..., None, :], tf.float16)

    def shard_positions(self, split, records=None):
        """Each shard's image positions in its order, as read when the table was filled."""
        if split != self.split:
            raise KerasSaatError(
                f"the resident features hold the '{self.split}' split, not '{split}'"
            )
        return self._shard_positions

    def skipped(self, split):
        return self.cache.skipped(split)

    def shard_files(self, splits):
        return self.cache.shard_files(splits)

    def planned_batches(self, split, records, batches, windows, tokens, plan):
        """Each batch's image positions ("image_index") beside its tokens; nothing is read."""

        def indexed(b):
            size = b["sizes"]
            # A padded batch's empty places (-1) read row 0: their captions weigh nothing.
            index = b["positions"][:size] if plan.sliced else tf.maximum(b["positions"], 0)
            return {"image_index": index, "tokens": tokens(b["rows"], size, b["widths"])}

        out = tf.data.Dataset.from_tensor_slices(batches)
        return out.map(indexed, num_parallel_calls=tf.data.AUTOTUNE)

    def evaluation_batches(self, split, records, batch_size, positions=None):
        """Decoding reads the cache's rows (`FeatureCache.evaluation_batches`)."""
        return self.cache.evaluation_batches(split, records, batch_size, positions)
