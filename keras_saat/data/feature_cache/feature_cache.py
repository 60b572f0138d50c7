"""The feature cache: the frozen backbone's output, computed once, in sharded TFRecords.

Layout of a cache folder:
    index.json                          what was extracted, how (the encoder's and the
                                        dataset's fingerprints), and per shard: its
                                        images' stamps (`shard_inputs`), what was skipped
    <split>-<i>-of-<n>.tfrecord         one tf.train.Example per image:
                                        position (int64, the image's index in its split),
                                        features (bytes: the (L, C) grid in the cache
                                        dtype; int8 with its channel scales, zlib when
                                        compressed: `cache_format`)

    progress.jsonl                      only while an extraction runs or after it was
                                        killed: one JSON line per finished shard
                                        ({"split", "shard", "written", "skipped",
                                        "inputs", "bytes"}),
                                        folded into index.json when extraction ends

Extraction is resumable: a shard is written under a temporary name and
renamed, and recorded (one line appended to progress.jsonl, so recording stays
constant work a shard however many there are), only once complete; a restarted
run reads index.json with progress.jsonl's lines applied, keeps finished shards
and redoes the rest, and the shards whose image files changed since (`reopen_changed`).
Decoding (tf.data, parallel), the
backbone (a compiled function) and writing (a thread) overlap. The index and
progress bookkeeping lives in `keras_saat.data.feature_cache.cache_index`, shared with the Beam
extractor (`keras_saat.beam.extraction`), which writes this same layout.
"""

import os
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_saat.data.feature_cache.cache_format import (  # noqa: F401  (the record functions live there)
    DTYPES,
    RECORD_SPEC,
    check_format,
    dataset_fingerprint,
    decode_features,
    encoder_fingerprint,
    feature_example,
    format_name,
    record_bytes,
    shard_inputs,
)
from keras_saat.data.feature_cache.cache_index import (  # noqa: F401  (the layout's names, here too)
    INDEX,
    MISSING,
    PROGRESS,
    UNDECODABLE,
    VERSION,
    compact_index,
    file_skip_reason,
    finish_shard,
    image_place,
    open_extraction,
    open_index,
    read_index,
    says_todo,
    shard_records,
    skipped_entries,
    split_entry,
    todo_shards,
)
from keras_saat.data.readers.caption_dataset import SPLITS, Skips
from keras_saat.data.images import decode_calls, image_decoder
from keras_saat.runtime.pipeline_options import without_autotune
from keras_saat.data.feature_cache.shard_checks import check_shard, damaged_shard_error, read_error_reason
from keras_saat.errors import KerasSaatError


class FeatureCache:
    """Reads a feature cache folder written by `extract_features`."""

    def __init__(self, directory):
        self.directory = Path(directory)
        path = self.directory / INDEX
        if not path.is_file():
            raise KerasSaatError(
                f"no feature cache in {self.directory}; run `keras-saat extract-features` first"
            )
        self.index = read_index(self.directory)

    @property
    def grid_shape(self):
        return tuple(self.index["grid"])

    @property
    def num_locations(self):
        return self.index["grid"][0] * self.index["grid"][1]

    @property
    def channels(self):
        return self.index["channels"]

    def complete(self, split):
        shards = self.index["splits"][split]["shards"]
        return all(s["done"] for s in shards)

    def files(self, split):
        """The split's shard files, each checked to be whole (`check_shard`: its size
        against the one written, a stat a shard), so a missing or truncated one is named
        here, before any is read."""
        if split not in self.index["splits"] or not self.complete(split):
            raise KerasSaatError(
                f"the feature cache in {self.directory} has no complete '{split}' split"
            )
        shards = self.index["splits"][split]["shards"]
        for shard in shards:
            check_shard(self.directory / shard["file"], shard.get("bytes"))
        return [str(self.directory / s["file"]) for s in shards]

    def count(self, split):
        return sum(s["written"] for s in self.index["splits"][split]["shards"])

    def skipped(self, split):
        """[(position, reason), ...] of images that could not be read."""
        return [tuple(x) for s in self.index["splits"][split]["shards"] for x in s["skipped"]]

    @property
    def dtype(self):
        return self.index["dtype"]

    @property
    def compression(self):
        return self.index.get("compression", "none")

    def parse_fn(self, keep_dtype=False):
        """serialized tf.train.Example -> {"position": int32, "features": (L, C)}, float32
        unless keep_dtype (then the cache dtype; an int8 cache's rows dequantised to float16)."""
        shape = (self.num_locations, self.channels)
        out = None if keep_dtype else tf.float32

        def parse(serialized):
            example = tf.io.parse_single_example(serialized, RECORD_SPEC)
            features = decode_features(example, shape, self.dtype, self.compression, out)
            return {"position": tf.cast(example["position"], tf.int32), "features": features}

        return parse

    def _interleaved(self, split, shuffle_files, seed, open_shard):
        """The split's shards, shuffled by `seed` when asked, read round-robin (four at a
        time) in a fixed order: `open_shard(file name, shard number) -> tf.data.Dataset`.
        `dataset` and `positions_dataset` share it, so both give one order for a seed."""
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
        return records.map(self.parse_fn(keep_dtype), num_parallel_calls=tf.data.AUTOTUNE)

    def read_shard(self, name, chunk=1024):
        """(positions int32 (n,), features (n, L, C) in the cache dtype, scales (n, C) float16
        or None) chunks of one shard file, in the order it holds them, parsed a chunk at a
        time (scales: an int8 cache's per-image channel scales, `cache_format`)."""
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
            positions = tf.cast(examples["position"], tf.int32)
            try:
                if self.dtype == "int8":
                    rows, scales = decode_features(
                        examples, shape, self.dtype, self.compression, tf.int8
                    )
                else:
                    rows = decode_features(examples, shape, self.dtype, self.compression)
                    scales = None
            except tf.errors.InvalidArgumentError:  # a record's length (`decode_features`)
                size = record_bytes(shape, self.dtype)
                reason = f"a record does not hold the {size} bytes of one image's features"
                raise damaged_shard_error(name, reason) from None
            yield positions, rows, scales

    def positions_dataset(self, split, shard_positions, shuffle_files=False, seed=None):
        """tf.data of {"position": int32} per image, in the order `dataset` gives for the
        same `shuffle_files` and `seed`, without reading the shards: `shard_positions` holds
        each shard's positions in its order (`read_shard`; the device-resident features
        keep them)."""
        rows = tf.RaggedTensor.from_row_lengths(
            np.concatenate([np.zeros(0, np.int32), *shard_positions]).astype(np.int32),
            [len(p) for p in shard_positions],
        )

        def open_shard(_, number):
            return tf.data.Dataset.from_tensor_slices({"position": rows[number]})

        return self._interleaved(split, shuffle_files, seed, open_shard)

    def load(self, split):
        """The whole split in memory, in position order: (positions (N,), features (N, L, C) float32)."""
        positions, features = [], []
        for batch in self.dataset(split).batch(256).as_numpy_iterator():
            positions.append(batch["position"])
            features.append(batch["features"])
        positions = np.concatenate(positions)
        order = np.argsort(positions)
        return positions[order], np.concatenate(features)[order]


def _read_file(position, path):
    return position, tf.io.read_file(path)


def _image_stream(dataset, split, records, start, stop, size, resize, skips):
    """tf.data of (position, pixels) for records[start:stop]; unreadable images drop out."""
    if dataset.image_source is None:
        positions, paths = [], []
        for position in range(start, stop):
            path = records[position].path
            reason = file_skip_reason(path)
            if reason:
                skips.add(reason, image_place(records[position]))
                continue
            positions.append(position)
            paths.append(str(path))
        if not positions:
            return None
        stream = tf.data.Dataset.from_tensor_slices((np.asarray(positions, np.int32), paths))
        stream = stream.map(_read_file, num_parallel_calls=decode_calls())
    else:
        # Streamed sources (TFDS) yield stream positions; map them to this split's record positions.
        keys = tf.constant([r.stream_position for r in records[start:stop]], tf.int32)
        values = tf.range(start, stop, dtype=tf.int32)
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)
        stream = dataset.image_source(split).map(lambda p, image: (table.lookup(p), image))
        stream = stream.filter(lambda p, image: p >= 0)

    decoder = image_decoder(size, resize)  # traced once a process, not once a shard

    def decode(position, encoded):
        return position, decoder(encoded)

    stream = stream.map(decode, num_parallel_calls=decode_calls())
    # Undecodable images vanish; the gaps in positions count them. Fixed parallelism (one
    # call a core, not the autotuner: with it, the end of a shard's stream could stall).
    return without_autotune(stream.ignore_errors())


class _ShardWriter(threading.Thread):
    """Serialises and writes examples on a thread, so writing overlaps the backbone."""

    def __init__(self, path, dtype, compression):
        super().__init__(daemon=True)
        self.path, self.queue, self.error, self.written = path, queue.Queue(maxsize=8), None, []
        self.format = (dtype, compression)

    def run(self):
        try:
            with tf.io.TFRecordWriter(str(self.path)) as writer:
                while (item := self.queue.get()) is not None:
                    positions, features = item
                    for position, row in zip(positions, features, strict=True):
                        writer.write(feature_example(position, row, *self.format))
                        self.written.append(int(position))
        except Exception as err:  # surfaced by the main thread
            self.error = err
            while self.queue.get() is not None:
                pass


def _bar(split, done, total, start):
    """A progress bar redrawn in place, on a terminal only (logs get one line per shard)."""
    if not sys.stdout.isatty():
        return
    rate = done / max(time.perf_counter() - start, 1e-9)
    filled = int(30 * done / max(total, 1))
    sys.stdout.write(
        f"\r  extract {split} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}, {rate:.0f} img/s "
    )
    sys.stdout.flush()
    if done >= total:
        sys.stdout.write("\r" + " " * 80 + "\r")


def extract_features(
    encoder,
    dataset,
    directory,
    splits=SPLITS,
    shard_size=1000,
    dtype="float16",
    compression="none",
    batch_size=32,
    resize="crop",
    strict=False,
    log=print,
):
    """Runs the encoder once over every image of `splits` and writes the cache (resumable).

    Args:
        encoder: ImageEncoder. The frozen backbone (with its preprocessing).
        dataset: CaptionDataset.
        directory: str or Path. Cache folder (created).
        splits: tuple of str. Splits to extract. Defaults to train, val, test.
        shard_size: int. Images per TFRecord shard. Defaults to 1000.
        dtype: str. "float16" (half the disk), "float32" or "int8" (a quarter: per-image
            channel scales, `cache_format`). Defaults to "float16".
        compression: str. "none" or "zlib" (each record's features). Defaults to "none".
        batch_size: int. Images per backbone call. Defaults to 32.
        resize: str. "crop", "pad" or "stretch" (see `resize_image`). Defaults to "crop".
        strict: bool. Stop at the first unreadable image, naming it. Defaults to False.
        log: callable. Receives progress lines. Defaults to print.

    Returns:
        (FeatureCache, Skips) — the images skipped in this run.
    """
    check_format(dtype, compression)
    directory = Path(directory)
    index, _ = open_extraction(directory, encoder, dataset, resize, dtype, compression)
    encode = encoder.compiled("float32" if dtype == "int8" else dtype)  # int8: per image, on write
    skips = Skips(strict)
    for split in splits:
        records = dataset.split(split)
        count = len(records)
        entry = split_entry(directory, index, split, records, shard_size, log)
        size = entry["shard_size"]
        todo = todo_shards(directory, entry)
        if not says_todo(split, entry, todo, count, log):
            continue
        start_time, done = time.perf_counter(), 0
        total = sum(min(count, (j + 1) * size) - j * size for j in todo)
        for i in todo:
            shard = entry["shards"][i]
            start, stop = i * size, min(count, (i + 1) * size)
            inputs = shard_inputs(shard_records(records, i, size))  # before reading
            shard_skips = Skips(strict)
            stream = _image_stream(
                dataset, split, records, start, stop, encoder.image_size, resize, shard_skips
            )
            tmp = directory / (shard["file"] + ".tmp")
            writer = _ShardWriter(tmp, dtype, compression)
            writer.start()
            try:
                if stream is not None:
                    for positions, pixels in stream.batch(batch_size).prefetch(2):
                        features = encode(pixels).numpy()  # (B, L, C)
                        writer.queue.put((positions.numpy(), features))
                        _bar(split, done + len(writer.written), total, start_time)
                        if writer.error:
                            break
            finally:
                writer.queue.put(None)
                writer.join()
            if writer.error:
                raise KerasSaatError(f"cannot write the feature cache shard {tmp}: {writer.error}")
            reasons = skipped_entries(records, range(start, stop), writer.written, shard_skips)
            os.replace(tmp, directory / shard["file"])
            finish_shard(directory, split, i, shard, len(writer.written), reasons, inputs)
            skips.merge(shard_skips)
            done += stop - start
            rate = done / max(time.perf_counter() - start_time, 1e-9)
            log(
                f"  extract {split}: {done}/{total} images (shard {todo.index(i) + 1}/{len(todo)}), {rate:.0f} img/s"
            )
    compact_index(directory, index)
    for line in skips.summary():
        log(f"  {line}")
    return FeatureCache(directory), skips
