"""Image decoding and resizing in core TF ops: the one path from encoded bytes to the
model's pixels, so training, captioning and every export see an image alike. The header
is checked against `max_pixels` first; a JPEG is turned upright by its EXIF
orientation, and a PNG's transparency is composited onto white.
"""

import concurrent.futures
import functools
import os
import re

import numpy as np
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.images.header_checks import inspect_image, inspect_images
from keras_saat.images.image_files import read_image_file
from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS, JPEG, PNG

RESIZE_MODES = ("crop", "pad", "stretch")
ALPHA_BACKGROUND = 255.0  # transparent PNG pixels become white, as image viewers show them
# tf.debugging.Assert's message: "assertion failed: [text]" in a graph, "Summarized
# data: b'text'" when eager.
_ASSERTION = re.compile(r"assertion failed: \[(?P<graph>.*)\]|Summarized data: b'(?P<eager>.*)'")


def load_image(path, size, mode="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """Reads an image file as (size, size, 3) float32 pixels in [0, 255]; a KerasSaatError
    naming the file when it cannot be read or decoded."""
    _check_mode(mode)
    try:
        encoded = read_image_file(path)
    except FileNotFoundError:
        raise KerasSaatError(f"image file not found: {path}") from None
    except IsADirectoryError:
        raise KerasSaatError(f"cannot read image {path}: a folder, not an image file") from None
    except (OSError, ValueError) as err:
        reason = err if isinstance(err, ValueError) else (err.strerror or err)
        raise KerasSaatError(f"cannot read image {path}: {reason}") from None
    try:
        return image_decoder(size, mode, max_pixels)(tf.constant(encoded)).numpy()
    except tf.errors.InvalidArgumentError as err:
        raise KerasSaatError(f"cannot read image {path}: {decode_error(err)}") from None


def image_decoder(size, mode="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """`decode_image` traced once a process for these settings (a tf.function of one
    scalar string)."""
    return _traced(decode_image, (), int(size), mode, int(max_pixels))


def batch_decoder(size, mode="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """`decode_images` traced once a process for these settings (a tf.function of a (B,)
    string batch)."""
    return _traced(decode_images, (None,), int(size), mode, int(max_pixels))


@functools.lru_cache(maxsize=32)
def _traced(decode, shape, size, mode, max_pixels):
    """`decode` as a tf.function of a string tensor of `shape`, one a process per setting."""
    return tf.function(
        lambda encoded: decode(encoded, size, mode, max_pixels),
        input_signature=[tf.TensorSpec(list(shape), tf.string)],
    )


def decode_calls():
    """Parallel reads and decodes of images: one a core this process may run on (>= 2)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, cores or 2)


def decode_error(err):
    """The one-line reason inside a decoding op's InvalidArgumentError."""
    match = _ASSERTION.search(err.message)
    if match:
        return match["graph"] or match["eager"]
    return err.message.splitlines()[0]


def load_images(paths, size, mode="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """`load_image` over paths, `decode_calls()` at a time, stacked: (N, size, size, 3)
    float32. The first file that cannot be read raises `load_image`'s error."""
    paths = [str(path) for path in paths]
    out = np.empty((len(paths), size, size, 3), dtype=np.float32)
    _check_mode(mode)

    def load(i):
        out[i] = load_image(paths[i], size, mode, max_pixels)

    if len(paths) == 1:
        load(0)
        return out
    with concurrent.futures.ThreadPoolExecutor(min(decode_calls(), len(paths) or 1)) as pool:
        list(pool.map(load, range(len(paths))))  # raises the first error
    return out


def _check_mode(mode):
    if mode not in RESIZE_MODES:
        raise KerasSaatError(f"resize mode {mode!r} is not one of {', '.join(RESIZE_MODES)}")


def resize_image(image, size, mode="crop"):
    """Resizes an (h, w, C) image, or a (B, h, w, C) batch, to size x size float32; core TF ops.

    Args:
        image: (h, w, C) or (B, h, w, C) tensor, any numeric dtype, values in [0, 255].
            uint8 stays uint8 until the resize, so a large image is never held as float.
        size: int. Output side.
        mode: str. "crop": the centre square, scaled to `size` (the paper's practice);
            "pad": scaled so the longer side is `size`, then padded with zeros;
            "stretch": each side scaled independently. Defaults to "crop".
    """
    return _resize(image, size, mode)


def _resize(image, size, mode, finish=None):
    """`resize_image`, with `finish` applied to the scaled image before any padding."""
    _check_mode(mode)
    finish = finish or (lambda scaled: scaled)
    image = tf.convert_to_tensor(image)
    if mode == "stretch":
        return finish(tf.image.resize(image, (size, size)))
    shape = tf.shape(image)
    height, width = shape[-3], shape[-2]
    if mode == "crop":
        side = tf.minimum(height, width)
        top, left = (height - side) // 2, (width - side) // 2
        square = image[..., top : top + side, left : left + side, :]  # (side, side, C)
        return finish(tf.image.resize(square, (size, size)))
    # pad: the longer side becomes `size`; the other keeps the aspect ratio, at least 1.
    # Integer arithmetic: a float ratio's last bit differs between eager ops and a graph
    # whose optimiser rewrites the division (100 x 200 to 48 gave 24 rows, or 23).
    longer = tf.cast(tf.maximum(height, width), tf.int64)
    new_h = tf.cast(tf.maximum(tf.cast(height, tf.int64) * size // longer, 1), tf.int32)
    new_w = tf.cast(tf.maximum(tf.cast(width, tf.int64) * size // longer, 1), tf.int32)
    scaled = finish(tf.image.resize(image, tf.stack([new_h, new_w])))
    top, left = (size - new_h) // 2, (size - new_w) // 2
    return tf.image.pad_to_bounding_box(scaled, top, left, size, size)


def _upright(image, orientation):
    """Applies an EXIF orientation (1-8) to an (h, w, C) image: what a viewer displays."""
    branches = [
        lambda: image,  # 1: as stored
        lambda: tf.reverse(image, [1]),  # 2: mirrored left-right
        lambda: tf.reverse(image, [0, 1]),  # 3: rotated 180
        lambda: tf.reverse(image, [0]),  # 4: mirrored top-bottom
        lambda: tf.transpose(image, [1, 0, 2]),  # 5: transposed
        lambda: tf.reverse(tf.transpose(image, [1, 0, 2]), [1]),  # 6: rotated 90 clockwise
        lambda: tf.reverse(tf.transpose(image, [1, 0, 2]), [0, 1]),  # 7: transversed
        lambda: tf.reverse(tf.transpose(image, [1, 0, 2]), [0]),  # 8: rotated 90 anticlockwise
    ]
    return tf.switch_case(tf.clip_by_value(orientation, 1, 8) - 1, branches)


def _composite(rgba):
    """(size, size, 4) float RGBA in [0, 255] -> RGB over ALPHA_BACKGROUND."""
    alpha = rgba[..., 3:] / 255.0
    return rgba[..., :3] * alpha + ALPHA_BACKGROUND * (1.0 - alpha)


def _decode_checked(encoded, size, mode, code, orientation):
    """Pixels of an image whose header `inspect_image` accepted (format `code`)."""

    def with_alpha():  # PNG: its alpha channel (255 where it has none), composited after resizing
        image = tf.io.decode_png(encoded, channels=4)
        return _resize(image, size, mode, finish=_composite)

    def opaque():
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        image.set_shape([None, None, 3])
        image = tf.cond(tf.equal(code, JPEG), lambda: _upright(image, orientation), lambda: image)
        return resize_image(image, size, mode)

    # BMP, GIF and JPEG decode opaque (a 32-bit BMP's 4th byte is often unused, not alpha).
    pixels = tf.cond(tf.equal(code, PNG), with_alpha, opaque)
    return tf.ensure_shape(pixels, [size, size, 3])


def decode_image(encoded, size, mode="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """JPEG/PNG/GIF/BMP bytes -> (size, size, 3) float32 pixels in [0, 255]; raises
    InvalidArgumentError for a refused or corrupt image."""
    _check_mode(mode)
    valid, error, code, orientation = inspect_image(encoded, max_pixels)
    with tf.control_dependencies([tf.debugging.Assert(valid, [error])]):
        return _decode_checked(tf.identity(encoded), size, mode, code, orientation)


def decode_images(image_bytes, size, resize="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """Decodes and resizes a batch of encoded images; bad ones become zeros, marked invalid.

    Args:
        image_bytes: (B,) string tensor: JPEG, PNG, GIF (first frame) or BMP bytes.
        size: int. Output side.
        resize: str. "crop", "pad" or "stretch" (`resize_image`). Defaults to "crop".
        max_pixels: int. Largest decode accepted (`inspect_image`). Defaults to
            DEFAULT_MAX_PIXELS.

    Returns:
        (pixels (B, size, size, 3) float32 in [0, 255], valid (B,) bool, error (B,) string).
    """
    _check_mode(resize)
    image_bytes = tf.reshape(image_bytes, [-1])
    batch = tf.shape(image_bytes, out_type=tf.int64)[0]
    header_ok, error, code, orientation = inspect_images(image_bytes, max_pixels)

    def decode(index, data, ok, code, orientation):
        return index, _decode_checked(data, size, resize, code, orientation)

    decoded = (
        tf.data.Dataset.from_tensor_slices(
            (tf.range(batch), image_bytes, header_ok, code, orientation)
        )
        .filter(lambda index, data, ok, code, orientation: ok)
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .ignore_errors()
    )
    # A sentinel that always decodes, so the batch below is never empty.
    sentinel = tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), tf.zeros([size, size, 3])))
    indices, images = decoded.concatenate(sentinel).batch(batch + 1).get_single_element()
    keep = indices >= 0
    indices = tf.boolean_mask(indices, keep)[:, None]  # (n, 1)
    pixels = tf.scatter_nd(indices, tf.boolean_mask(images, keep), [batch, size, size, 3])
    decoded_ok = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.bool), [batch])
    failed = tf.logical_and(header_ok, tf.logical_not(decoded_ok))
    format_error = tf.constant("cannot decode the image: its data is truncated or corrupt")
    error = tf.where(failed, format_error, error)
    return pixels, decoded_ok, error
