"""tf.data batches that follow an epoch plan (`epoch_order.epoch_plan`), from any source.

The plan says which image and caption rows make each batch; this module fetches them:
device-resident features by index (the batch carries "image_index"), the feature cache a
window of shards at a time (its rows read into memory once, each batch gathered from
them), or image files decoded a caption (group) at a time. A plan sliced at step `s`
(`epoch_order.from_step`) gives a dataset whose first batch is batch `s`, having read
only the shards of the windows from batch `s` on.
"""

import numpy as np
import tensorflow as tf

from keras_saat.data.images import decode_image
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.errors import KerasSaatError
from keras_saat.text.vocabulary import PAD_ID

_BATCH_KEYS = ("positions", "rows", "sizes", "widths", "local")


def plan_arrays(plan, shard_positions, count):
    """The plan as flat arrays: per batch (`_BATCH_KEYS`: "local" is a unit's row among its
    window's rows, in the order its shards hold them) and per window of the plan's
    batches ("window_batches", "window_shards", "window_positions", each with its splits).
    """
    windows = plan["windows"]
    used = np.unique(windows)
    slot = np.full(count + 1, -1, np.int64)  # position -> its row in its window
    shard_lists, position_lists = [], []
    for window in used:
        shards = plan["window_shards"][window]
        positions = np.concatenate([np.zeros(0, np.int64), *(shard_positions[s] for s in shards)])
        slot[positions] = np.arange(len(positions))
        shard_lists.append(shards)
        position_lists.append(positions)
    # Batches of one window are consecutive; where each window's batches start and end.
    bounds = np.searchsorted(windows, used, side="left")
    batch_splits = np.append(bounds, len(windows))

    def flat(lists, dtype):
        values = np.concatenate([np.zeros(0, dtype), *lists]).astype(dtype)
        return values, np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)

    shards, shard_splits = flat(shard_lists, np.int32)
    positions, position_splits = flat(position_lists, np.int32)
    return {
        "positions": plan["positions"],
        "rows": plan["rows"],
        "sizes": plan["sizes"],
        "widths": plan["widths"],
        "local": np.maximum(slot[plan["positions"]], 0).astype(np.int32),
        "window_batches": batch_splits.astype(np.int64),
        "window_shards": shards,
        "window_shard_splits": shard_splits,
        "window_positions": positions,
        "window_position_splits": position_splits,
    }


def planned_batches(
    source, split, arrays, tokens_of, records=None, image_size=None, resize="crop", **options
):
    """The plan's batches from `source`: {"features" | "image_index" | "images", "tokens"}.

    Args:
        source: FeatureCache, ResidentFeatures or "images".
        split: str. The split the plan covers.
        arrays: dict of tf.Tensor. `plan_arrays` of the plan.
        tokens_of: the split's `token_table`.
        records: list of ImageRecord. With "images". Defaults to None.
        image_size: int. With "images". Defaults to None.
        resize: str. With "images". Defaults to "crop".
        **options: bucketed (bool: slice each batch's tokens to its width),
            drop_remainder (bool: every batch full, static shapes), batch_size (int) and
            float_images (bool: images as float32, else uint8).
    """
    flat = tokens_of.flat_values  # (R, W)
    width = int(flat.shape[-1])
    # Row -1 (no caption: a group's padding) reads the all-<pad> row appended at R.
    table = tf.concat([flat, tf.fill([1, width], tf.constant(PAD_ID, flat.dtype))], 0)
    pad_row = tf.shape(flat, out_type=tf.int32)[0]
    bucketed, partial = options.get("bucketed", False), not options.get("drop_remainder", True)

    def tokens(rows, size, row_width):
        rows = tf.where(rows < 0, pad_row, rows)
        out = tf.gather(table, rows)  # (B, W) or (B, k, W); one unit's: (W,) or (k, W)
        if bucketed:
            out = out[..., :row_width]
        return out[:size] if partial and size is not None else out

    arrays = {k: tf.convert_to_tensor(v) for k, v in arrays.items()}
    per_batch = {k: arrays[k] for k in _BATCH_KEYS}
    if isinstance(source, ResidentFeatures):

        def indexed(b):
            size = b["sizes"]
            index = b["positions"][:size] if partial else b["positions"]
            return {"image_index": index, "tokens": tokens(b["rows"], size, b["widths"])}

        batches = tf.data.Dataset.from_tensor_slices(per_batch)
        return batches.map(indexed, num_parallel_calls=tf.data.AUTOTUNE)
    if isinstance(source, str):
        return _image_batches(source, arrays, tokens, records, image_size, resize, options)
    return _cache_batches(source, split, arrays, tokens, partial)


def _cache_batches(cache, split, arrays, tokens, partial):
    """A window's shards read into memory at a time (the next one while this one's
    batches go), each batch gathered from them."""
    files = tf.constant(cache.files(split))
    parse = cache.parse_fn(keep_dtype=True)
    batch_splits = arrays["window_batches"]
    shards = tf.RaggedTensor.from_row_splits(arrays["window_shards"], arrays["window_shard_splits"])
    expected = tf.RaggedTensor.from_row_splits(
        arrays["window_positions"], arrays["window_position_splits"]
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
            message=f"the feature cache in {cache.directory} holds other {split} images "
            "than its index.json says; delete the folder to extract again",
        )
        with tf.control_dependencies([check]):
            return window, tf.identity(read["features"])  # (n, L, C)

    def gathered(window, rows):
        start, stop = batch_splits[window], batch_splits[window + 1]
        batches = {k: arrays[k][start:stop] for k in _BATCH_KEYS}

        def batch(b):
            local = b["local"][: b["sizes"]] if partial else b["local"]
            return {
                "features": tf.gather(rows, local),
                "tokens": tokens(b["rows"], b["sizes"], b["widths"]),
            }

        return tf.data.Dataset.from_tensor_slices(batches).map(batch)

    windows = tf.data.Dataset.range(tf.size(batch_splits, out_type=tf.int64) - 1)
    return windows.map(load).prefetch(1).flat_map(gathered)


def _image_batches(source, arrays, tokens, records, image_size, resize, options):
    """Each unit's image decoded from its file (unreadable ones drop out), batched."""
    if source != "images":
        raise KerasSaatError(
            f"unknown batch source {source!r}: a FeatureCache, ResidentFeatures or 'images'"
        )
    paths = tf.constant([str(r.path) for r in records] or [""])
    units = tf.data.Dataset.from_tensor_slices({k: arrays[k] for k in _BATCH_KEYS})

    def spread(b):  # one batch's units, each with its batch's width
        count = tf.shape(b["positions"])[0]
        return {
            "positions": b["positions"],
            "rows": b["rows"],
            "widths": tf.fill([count], b["widths"]),
        }

    def load(unit):
        pixels = decode_image(tf.io.read_file(paths[unit["positions"]]), image_size, resize)
        return {
            "images": tf.cast(pixels, tf.uint8),
            "tokens": tokens(unit["rows"], None, unit["widths"]),
        }

    units = units.map(spread).unbatch().filter(lambda u: u["positions"] >= 0)
    units = units.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    units = units.ignore_errors()
    spec = units.element_spec
    shapes = {"images": spec["images"].shape, "tokens": spec["tokens"].shape}
    padding = {"images": tf.constant(0, tf.uint8), "tokens": tf.constant(PAD_ID, tf.int32)}
    batches = units.padded_batch(
        options["batch_size"], shapes, padding, drop_remainder=options.get("drop_remainder", True)
    )
    if not options.get("float_images", False):
        return batches
    return batches.map(
        lambda b: {"images": tf.cast(b["images"], tf.float32), "tokens": b["tokens"]},
        num_parallel_calls=tf.data.AUTOTUNE,
    )
