"""Decoding and resizing images (core TF ops, shared by training, caching and captioning)."""

import numpy as np

from keras_saat.errors import KerasSaatError


def load_image(path, size, mode="crop"):
    """Reads an image file as (size, size, 3) float32 pixels in [0, 255].

    The same decoding and resizing as the tf.data pipeline and the feature cache
    (`decode_image`), so captioning a file sees what training saw.
    Raises a KerasSaatError naming the file when it is missing or not an image.
    """
    import tensorflow as tf

    try:
        encoded = tf.io.read_file(str(path))
    except tf.errors.NotFoundError:
        raise KerasSaatError(f"image file not found: {path}") from None
    try:
        return decode_image(encoded, size, mode).numpy()
    except tf.errors.InvalidArgumentError as err:
        raise KerasSaatError(f"cannot read image {path}: {err.message.splitlines()[0]}") from None


def load_images(paths, size, mode="crop"):
    """Stacks `load_image` over paths: (N, size, size, 3) float32."""
    out = np.empty((len(paths), size, size, 3), dtype=np.float32)
    for i, path in enumerate(paths):
        out[i] = load_image(path, size, mode)
    return out


RESIZE_MODES = ("crop", "pad", "stretch")


def resize_image(image, size, mode="crop"):
    """Resizes an (h, w, 3) image, or a (B, h, w, 3) batch, to size x size float32; core TF ops.

    Args:
        image: (h, w, 3) or (B, h, w, 3) tensor, any numeric dtype, values in [0, 255].
        size: int. Output side.
        mode: str. "crop": scale the shorter side to `size`, then centre-crop (the
            paper's practice); "pad": scale the longer side, then pad with zeros;
            "stretch": scale each side independently. Defaults to "crop".
    """
    import tensorflow as tf

    image = tf.cast(image, tf.float32)
    if mode == "stretch":
        return tf.image.resize(image, (size, size))
    if mode == "pad":
        return tf.image.resize_with_pad(image, size, size)
    if mode != "crop":
        raise KerasSaatError(f"resize mode {mode!r} is not one of {', '.join(RESIZE_MODES)}")
    shape = tf.cast(tf.shape(image)[-3:-1], tf.float32)
    scale = size / tf.reduce_min(shape)
    scaled = tf.cast(tf.math.ceil(shape * scale), tf.int32)
    image = tf.image.resize(image, scaled)
    return tf.image.resize_with_crop_or_pad(image, size, size)


def decode_image(encoded, size, mode="crop"):
    """JPEG/PNG/GIF/BMP bytes -> (size, size, 3) float32 pixels in [0, 255] (first GIF frame)."""
    import tensorflow as tf

    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return resize_image(image, size, mode)
