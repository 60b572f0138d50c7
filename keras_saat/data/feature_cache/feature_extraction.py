"""Filling a feature cache: the frozen backbone run once over a dataset's images.

Resumable: a shard is recorded in progress.jsonl only once written whole, and a
restarted run redoes only the missing shards and those whose images changed. Decoding,
the backbone and writing overlap.
"""

import concurrent.futures
import contextlib
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_saat.data.feature_cache.cache_format import check_format, shard_content, shard_inputs
from keras_saat.data.feature_cache.cache_index import (
    compact_index,
    file_skip_reason,
    finish_shard,
    image_place,
    open_extraction,
    says_todo,
    shard_records,
    skipped_entries,
    split_entry,
    todo_shards,
)
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.shard_writer import ShardWriter
from keras_saat.data.readers.caption_dataset import SPLITS, Skips
from keras_saat.errors import KerasSaatError
from keras_saat.images.decoded_batches import decoded_batches
from keras_saat.images.decoding import decode_calls, image_decoder
from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS
from keras_saat.io_utils import atomic_path
from keras_saat.runtime.pipeline_options import without_autotune


def _image_batches(dataset, split, records, start, stop, size, resize, skips, batch_size):
    """(positions (n,) int32, pixels (n, S, S, 3) float32) batches of the readable images
    of records[start:stop] (`decoded_batches`, or a streamed source's tf.data)."""
    if dataset.image_source is not None:
        yield from _streamed_batches(dataset, split, records, start, stop, size, resize, batch_size)
        return
    positions, paths = [], []
    for position in range(start, stop):
        path = records[position].path
        if reason := file_skip_reason(path):
            skips.add(reason, image_place(records[position]))
            continue
        positions.append(position)
        paths.append(str(path))
    positions = np.asarray(positions, np.int32)
    done = 0
    batches = decoded_batches(paths, size, resize, DEFAULT_MAX_PIXELS, batch_size)
    with contextlib.closing(batches):  # its reading thread stops with this generator
        for batch in batches:
            rows = len(batch["image"])
            if batch["image"] != paths[done : done + rows]:  # rows in the paths' order
                raise KerasSaatError(
                    f"the image reader returned {batch['image'][:1]} where "
                    f"{paths[done : done + 1]} was due: a bug, please report it"
                )
            chosen, valid = positions[done : done + rows], np.asarray(batch["valid"], bool)
            done += rows
            if valid.all():
                yield chosen, batch["pixels"]
            elif valid.any():
                yield chosen[valid], tf.boolean_mask(batch["pixels"], valid)


def _streamed_batches(dataset, split, records, start, stop, size, resize, batch_size):
    """`_image_batches` of a streamed source, its stream positions mapped to the split's."""
    keys = tf.constant([r.stream_position for r in records[start:stop]], tf.int32)
    values = tf.range(start, stop, dtype=tf.int32)
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)
    stream = dataset.image_source(split).map(lambda p, image: (table.lookup(p), image))
    stream = stream.filter(lambda p, image: p >= 0)
    decoder = image_decoder(size, resize)  # traced once a process, not once a shard
    stream = stream.map(lambda p, image: (p, decoder(image)), num_parallel_calls=decode_calls())
    # Undecodable images vanish; the gaps in positions count them. Fixed parallelism (one
    # call a core, not the autotuner: with it, the end of a shard's stream could stall).
    stream = without_autotune(stream.ignore_errors())
    for positions, pixels in stream.batch(batch_size).prefetch(2):
        yield positions.numpy(), pixels


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
    with concurrent.futures.ThreadPoolExecutor(1, "shard-content") as hashing:
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
            # On a terminal only: logs get one line per shard.
            bar = keras.utils.Progbar(total, unit_name="image") if sys.stdout.isatty() else None
            for i in todo:
                shard = entry["shards"][i]
                start, stop = i * size, min(count, (i + 1) * size)
                images = shard_records(records, i, size)
                inputs = shard_inputs(images)  # before reading
                # The bytes' hash is read beside the encoder's work (hashlib and file reads
                # let go of the GIL).
                content = hashing.submit(shard_content, images)
                shard_skips = Skips(strict)
                batches = _image_batches(
                    dataset, split, records, start, stop, encoder.image_size, resize,
                    shard_skips, batch_size,
                )  # fmt: skip
                with atomic_path(directory / shard["file"]) as tmp:
                    writer = ShardWriter(tmp, dtype, compression)
                    writer.start()
                    try:
                        for positions, pixels in batches:
                            writer.queue.put((positions, encode(pixels).numpy()))  # (B, L, C)
                            if bar is not None:
                                bar.update(done + len(writer.written))
                            if writer.error:
                                break
                    finally:
                        batches.close()
                        writer.queue.put(None)
                        writer.join()
                    if writer.error:
                        raise KerasSaatError(
                            f"cannot write the feature cache shard {tmp}: {writer.error}"
                        )
                reasons = skipped_entries(records, range(start, stop), writer.written, shard_skips)
                content = content.result()
                if shard_inputs(images, fresh=True) != inputs:  # a file changed while it was read
                    content = None
                finish_shard(
                    directory, split, i, shard, len(writer.written), reasons, inputs, content
                )
                skips.merge(shard_skips)
                done += stop - start
                rate = done / max(time.perf_counter() - start_time, 1e-9)
                shard_at = f"shard {todo.index(i) + 1}/{len(todo)}"
                log(f"  extract {split}: {done}/{total} images ({shard_at}), {rate:.0f} img/s")
    compact_index(directory, index)
    for line in skips.summary():
        log(f"  {line}")
    return FeatureCache(directory), skips
