"""The feature cache's record format: one tf.train.Example per image, written and parsed here.

Every writer builds its records with `feature_example`, so all write one format:

    position   int64   the image's index in its split
    features   bytes   float16 / float32: the (L, C) grid, row-major.
                       int8: (C,) float16 scales, then the (C, L) int8 grid, channel-major,
                       one symmetric scale per channel of this image.
                       zlib-compressed when the cache's compression is "zlib".

int8 keeps a quarter of float32's bytes, each channel within half a step of its own range;
channel-major, a channel silent over the image is one run of zeros for zlib. A record
longer than zlib writes for its shape is refused before it is inflated, and one of the
wrong length by name rather than reshaped. The fingerprints key a cache by what made it.
"""

import hashlib
import os
import zlib

import numpy as np
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.images.image_files import read_image_file

DTYPES = {"float16": np.float16, "float32": np.float32, "int8": np.int8}
COMPRESSIONS = ("none", "zlib")
SCALE_DTYPE = np.float16
_LEVEL = 6  # zlib's default: higher levels pack the features barely tighter, far slower
_QMAX = 127  # symmetric: -127..127, so 0.0 stays exactly 0
_HUGE = float(np.finfo(np.float16).max)
RECORD_SPEC = {
    "position": tf.io.FixedLenFeature([], tf.int64),
    "features": tf.io.FixedLenFeature([], tf.string),
}


def check_format(dtype, compression="none"):
    """Raises KerasSaatError naming the allowed values when a cache format is unknown."""
    if dtype not in DTYPES:
        raise KerasSaatError(f"cache dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if compression not in COMPRESSIONS:
        raise KerasSaatError(
            f"cache compression {compression!r} is not one of {', '.join(COMPRESSIONS)}"
        )


def format_name(dtype, compression="none"):
    """The format's one-word name ("int8", "int8+zlib"), which the fingerprint hashes."""
    return dtype if compression == "none" else f"{dtype}+{compression}"


def quantize_int8(rows):
    """(..., L, C) floats -> (int8 (..., L, C), float16 scales (..., C)).

    Symmetric per channel of each image: the scale is the smallest float16 >= max |value| /
    127, so nothing clips below 127 times float16's largest scale; a zero channel gets 0.

    Args:
        rows: (..., L, C) array of floats: one image's grid, or a batch of them.
    """
    rows = np.asarray(rows, np.float32)
    wanted = np.max(np.abs(rows), axis=-2).astype(np.float64) / _QMAX  # (..., C)
    scales = np.minimum(wanted, _HUGE).astype(SCALE_DTYPE)
    low = scales.astype(np.float64) < wanted
    scales = np.where(low, np.nextafter(scales, SCALE_DTYPE(np.inf)), scales)
    scales = np.minimum(scales, SCALE_DTYPE(_HUGE))
    divisor = np.where(scales > 0, scales.astype(np.float32), 1.0)[..., None, :]
    quantized = np.clip(np.rint(rows / divisor), -_QMAX, _QMAX).astype(np.int8)
    return quantized, scales


def dequantize_int8(quantized, scales):
    """The NumPy inverse of `quantize_int8`: (..., L, C) float32.

    Args:
        quantized: (..., L, C) int8 array.
        scales: (..., C) array, each image's channel scales.
    """
    return quantized.astype(np.float32) * scales.astype(np.float32)[..., None, :]


def feature_example(position, row, dtype="float16", compression="none"):
    """The serialized tf.train.Example of one image in the cache format `dtype`/`compression`.

    Args:
        position: int. The image's index in its split.
        row: (L, C) array of floats (cast or quantised to `dtype` here).
        dtype: str. "float16", "float32" or "int8". Defaults to "float16".
        compression: str. "none" or "zlib". Defaults to "none".
    """
    if dtype == "int8":
        values, scales = quantize_int8(row)
        data = scales.tobytes() + np.ascontiguousarray(values.T).tobytes()
    else:
        data = np.ascontiguousarray(row, DTYPES[dtype]).tobytes()
    if compression == "zlib":
        data = zlib.compress(data, _LEVEL)
    feature = {
        "position": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(position)])),
        "features": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


# How a damaged record is named: `naming_damaged_shards` finds the text between brackets
# in TensorFlow's error and raises it as the one line.
_DAMAGED = (
    "the feature cache holds a record {what} (a damaged or foreign cache); delete the "
    "cache folder and run `keras-saat extract-features` again"
)
_WRONG_LENGTH = _DAMAGED.format(what="that is not the {size} bytes its shape holds")
BAD_SCALES = _DAMAGED.format(what="whose int8 channel scales are not finite and >= 0")
BAD_POSITION = _DAMAGED.format(what="whose position is outside the {count} images of its split")


def record_bytes(shape, dtype):
    """The uncompressed bytes of one record's features (int8: the C float16 scales first)."""
    locations, channels = shape
    if dtype == "int8":
        return channels * np.dtype(SCALE_DTYPE).itemsize + locations * channels
    return locations * channels * np.dtype(DTYPES[dtype]).itemsize


def compress_bound(size):
    """zlib's compressBound: the most bytes `zlib.compress` writes for `size` bytes."""
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 13


def checked(data, ok, message):
    """`data` once `ok` holds, else an error with `[message]` (`naming_damaged_shards`)."""
    check = tf.debugging.Assert(ok, [f"[{message}]"], summarize=1)
    with tf.control_dependencies([check]):
        return tf.identity(data)


def inflate(data, size):
    """zlib-compressed records (a string tensor) -> their bytes, each exactly `size` long.
    tf.io.decode_compressed has no output bound and zlib packs up to about 1032:1, so a
    record longer than `compress_bound(size)` is refused before it is inflated."""
    fits = tf.reduce_all(tf.strings.length(data) <= compress_bound(size))
    wrong = _WRONG_LENGTH.format(size=size)
    out = tf.io.decode_compressed(checked(data, fits, wrong), compression_type="ZLIB")
    return checked(out, tf.reduce_all(tf.strings.length(out) == size), wrong)


def decode_features(examples, shape, dtype, compression="none", out_dtype=None):
    """Parsed records' "features" -> rows of `shape` ((L, C) per record).

    Args:
        examples: dict of the parsed string tensors (one record or a batch of them).
        shape: tuple. Each record's (L, C); a batch gets a leading -1.
        dtype: str. The cache dtype.
        compression: str. The cache compression.
        out_dtype: tf.DType or None. int8 is dequantised to this (float16 when None, what
            the model casts to anyway); float caches are cast to it when given.

    Returns:
        the rows, or for int8 with out_dtype tf.int8, (int8 rows, float16 scales).
    """
    data, size = examples["features"], record_bytes(shape, dtype)
    if compression == "zlib":
        data = inflate(data, size)
    else:
        wrong = _WRONG_LENGTH.format(size=size)
        data = checked(data, tf.reduce_all(tf.strings.length(data) == size), wrong)
    batched = data.shape.rank == 1
    lead = (-1,) if batched else ()
    if dtype != "int8":
        values = tf.reshape(tf.io.decode_raw(data, tf.as_dtype(dtype)), (*lead, *shape))
        return values if out_dtype is None else tf.cast(values, out_dtype)
    locations, channels = shape
    head = channels * np.dtype(SCALE_DTYPE).itemsize
    scales = tf.io.decode_raw(tf.strings.substr(data, 0, head), tf.as_dtype(SCALE_DTYPE))
    scales = tf.reshape(scales, (*lead, channels))
    usable = tf.reduce_all(tf.math.is_finite(scales) & (scales >= 0))
    scales = checked(scales, usable, BAD_SCALES)
    values = tf.io.decode_raw(tf.strings.substr(data, head, locations * channels), tf.int8)
    values = tf.reshape(values, (*lead, channels, locations))
    values = tf.transpose(values, [0, 2, 1] if batched else [1, 0])  # (..., L, C)
    if out_dtype == tf.int8:
        return values, scales
    rows = tf.cast(values, tf.float32) * tf.cast(scales, tf.float32)[..., None, :]
    return tf.cast(rows, out_dtype or tf.float16)


def encoder_fingerprint(encoder, resize, dtype):
    """A hash of what determines the features: backbone, size, weights, resize mode, cache
    format (`format_name`), and a compute precision other than float32."""
    compute = encoder.compute_dtype
    precision = "" if compute == "float32" else f"|compute={compute}"
    digest = hashlib.sha256(
        f"{encoder.backbone_name}|{encoder.image_size}|{resize}|{dtype}{precision}".encode()
    )
    for weight in encoder.feature_model.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()[:16]


def dataset_fingerprint(dataset):
    """A hash of which image sits at each position of each split (names and ids only; file
    contents are fingerprinted per shard, so a changed image re-extracts its shard only)."""
    digest = hashlib.sha256(dataset.name.encode())
    for record in dataset.records:
        digest.update(f"{record.split}|{record.imgid}|{record.name}|".encode())
    return digest.hexdigest()[:16]


def file_stamp(record, fresh=False):
    """An image file's "size|mtime_ns": its reader's stamp, else (or when `fresh`) a stat
    now; "missing" without a file, "" for a streamed image."""
    if record.stamp is not None and not fresh:
        return record.stamp
    if record.path is None:
        return ""
    try:
        found = os.stat(record.path)
    except (OSError, ValueError):
        return "missing"
    return f"{found.st_size}|{found.st_mtime_ns}"


def shard_content(records):
    """A hash of the bytes of a shard's images (ImageRecords, in position order), which
    `reopen_changed` compares when their stamps differ, so a dataset copied without its
    times keeps its features. None when a stamp changes around its read, a read fails, or
    an image is streamed; a file `read_image_file` refuses counts as unread."""
    digest = hashlib.sha256()
    for record in records:
        if record.path is None:
            return None
        stamp, data = file_stamp(record), None
        if stamp != "missing":
            if file_stamp(record, fresh=True) != stamp:
                return None
            try:
                data = read_image_file(record.path)
            except (ValueError, IsADirectoryError):  # refused, as the extraction refuses it
                pass
            except OSError:  # a failed read stands for no bytes: no hash
                return None
            if file_stamp(record, fresh=True) != stamp:
                return None
        digest.update(f"{record.name}|{'unread' if data is None else len(data)}|".encode())
        digest.update(data or b"")
    return digest.hexdigest()[:32]


def shard_inputs(records, fresh=False):
    """A hash of a shard's image files (ImageRecords) by size and modification time, so
    replaced images re-extract their shard unread; `fresh` stats every file now."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(f"{record.name}|{file_stamp(record, fresh)}|".encode())
    return digest.hexdigest()[:16]


def extraction_fingerprint(encoder, dataset, resize, dtype, compression):
    """What an extraction of `dataset` by `encoder` would record as its fingerprint."""
    return {
        "encoder": encoder_fingerprint(encoder, resize, format_name(dtype, compression)),
        "dataset": dataset_fingerprint(dataset),
    }


def extraction_header(encoder, resize, dtype, compression):
    """The index's header an extraction by `encoder` would write (backbone, grid, ...)."""
    return {
        "backbone": encoder.backbone_name,
        "image_size": encoder.image_size,
        "resize": resize,
        "grid": list(encoder.grid_shape),
        "channels": encoder.feature_channels,
        "dtype": dtype,
        "compression": compression,
        "compute_dtype": encoder.compute_dtype,
    }
