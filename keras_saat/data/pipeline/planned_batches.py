"""tf.data batches that follow an epoch plan (`epoch_order.epoch_plan`): each batch's tokens
gathered here, its image side asked of the feature source (resident rows by index, the
cache a window of shards at a time, image files a unit at a time)."""

import numpy as np
import tensorflow as tf

from keras_saat.text.vocabulary import PAD_ID

_BATCH_KEYS = ("positions", "rows", "sizes", "widths", "local")


def plan_arrays(plan, shard_positions, count):
    """The plan as flat arrays: per batch (`_BATCH_KEYS`; "local" is a unit's row among its
    window's rows) and per window ("window_batches", "window_shards", "window_positions",
    each with its splits).
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
        **{key: plan[key] for key in ("positions", "rows", "sizes", "widths")},
        "local": np.maximum(slot[plan["positions"]], 0).astype(np.int32),
        "window_batches": batch_splits.astype(np.int64),
        "window_shards": shards,
        "window_shard_splits": shard_splits,
        "window_positions": positions,
        "window_position_splits": position_splits,
    }


def planned_batches(source, split, records, arrays, tokens_of, plan):
    """The batches of a plan (`plan_arrays`) of `split`: {"features" | "image_index" |
    "images", "tokens"}, the image side asked of `source` (a FeatureSource), the tokens
    gathered from `tokens_of` (the split's `token_table`) and cut as `plan` says."""
    flat = tokens_of.flat_values  # (R, W)
    width = int(flat.shape[-1])
    # Row -1 (no caption: a group's padding) reads the all-<pad> row appended at R.
    table = tf.concat([flat, tf.fill([1, width], tf.constant(PAD_ID, flat.dtype))], 0)
    pad_row = tf.shape(flat, out_type=tf.int32)[0]

    def tokens(rows, size, row_width):
        rows = tf.where(rows < 0, pad_row, rows)
        out = tf.gather(table, rows)  # (B, W) or (B, k, W); one unit's: (W,) or (k, W)
        if plan.bucket_by_length:
            out = out[..., :row_width]
        return out[:size] if plan.sliced and size is not None else out

    arrays = {k: tf.convert_to_tensor(v) for k, v in arrays.items()}
    batches = {k: arrays[k] for k in _BATCH_KEYS}
    windows = {k: v for k, v in arrays.items() if k.startswith("window_")}
    return source.planned_batches(split, records, batches, windows, tokens, plan)
