"""Image files as a feature source: pixels decoded a batch at a time, where the backbone
trains (its features change every step) or no cache is wanted."""

import numpy as np
import tensorflow as tf

from keras_saat.images.decoding import decode_image
from keras_saat.runtime.pipeline_options import without_autotune
from keras_saat.text.vocabulary import PAD_ID


class ImageFiles:
    """A split's image files, decoded and resized a batch at a time (`FeatureSource`).

    Args:
        image_size: int. The side the images are resized to (the model's input).
        resize: str. "crop", "pad" or "stretch" (`resize_image`). Defaults to "crop".
    """

    streams = False  # no features on disk: per-image groups save nothing
    pads_partial_batches = False  # padding images would reach the backbone's batch statistics
    cache = None

    def __init__(self, image_size, resize="crop"):
        self.image_size, self.resize = image_size, resize

    def shard_positions(self, split, records):
        """One "shard" of every record: the files have no shard order."""
        return [np.arange(len(records), dtype=np.int32)]

    def skipped(self, split):
        """None known up front: an unreadable file drops out as it is decoded."""
        return []

    def shard_files(self, splits):
        return []

    def planned_batches(self, split, records, batches, windows, tokens, plan):
        """Each unit's image decoded from its file (unreadable ones drop out), batched."""
        paths = tf.constant([str(r.path) for r in records] or [""])
        units = tf.data.Dataset.from_tensor_slices(batches)

        def spread(b):  # one batch's units, each with its batch's width
            widths = tf.fill(tf.shape(b["positions"])[:1], b["widths"])
            return {"positions": b["positions"], "rows": b["rows"], "widths": widths}

        # Per caption, the pixels stay float32, as `generate` decodes them; per image they
        # travel as uint8 (a quarter of the bytes), rounded.
        dtype = tf.float32 if plan.float_images else tf.uint8

        def load(unit):
            encoded = tf.io.read_file(paths[unit["positions"]])
            pixels = decode_image(encoded, self.image_size, self.resize)
            if not plan.float_images:
                pixels = tf.round(pixels)
            return {
                "images": tf.cast(pixels, dtype),
                "tokens": tokens(unit["rows"], None, unit["widths"]),
            }

        units = units.map(spread).unbatch().filter(lambda u: u["positions"] >= 0)
        units = units.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        units = units.ignore_errors()
        shapes = {key: spec.shape for key, spec in units.element_spec.items()}
        padding = {"images": tf.constant(0, dtype), "tokens": tf.constant(PAD_ID, tf.int32)}
        # The units of every window are batched as one stream, so at most the epoch's last
        # batch is partial; `pad_remainder` drops it (`pads_partial_batches`).
        return units.padded_batch(plan.batch_size, shapes, padding, drop_remainder=not plan.sliced)

    def evaluation_batches(self, split, records, batch_size, positions=None):
        """Per-image batches {"position", "images"} decoded from files (unreadable images drop
        out); only the images at `positions` when given."""
        positions = np.arange(len(records)) if positions is None else np.asarray(positions)
        paths = [str(records[p].path) for p in positions]
        files = tf.data.Dataset.from_tensor_slices((positions.astype(np.int32), paths))

        def load(position, path):
            pixels = decode_image(tf.io.read_file(path), self.image_size, self.resize)
            return {"position": position, "images": tf.cast(pixels, tf.float32)}

        images = files.map(load, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
        return without_autotune(images.batch(batch_size).prefetch(tf.data.AUTOTUNE))
