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


def load_images(paths, size, mode="crop", batch_size=64):
    """`load_image` over paths, stacked: (N, size, size, 3) float32.

    The files are decoded by a tf.data pipeline, two at a time in graph mode: one eager
    `load_image` call per file ran the decode and resize ops one by one, several
    milliseconds a file. A file that cannot be read raises `load_image`'s error, which
    names it.
    """
    import tensorflow as tf

    from keras_saat.data.input_pipeline import without_autotune

    paths = [str(path) for path in paths]
    out = np.empty((len(paths), size, size, 3), dtype=np.float32)
    if not paths:
        return out
    if mode not in RESIZE_MODES:
        raise KerasSaatError(f"resize mode {mode!r} is not one of {', '.join(RESIZE_MODES)}")
    batches = (
        tf.data.Dataset.from_tensor_slices(paths)
        .map(lambda path: decode_image(tf.io.read_file(path), size, mode), num_parallel_calls=2)
        .batch(batch_size)
        .prefetch(1)
    )
    batches = without_autotune(batches)  # fixed parallelism: no wait at the iterator's end
    done = 0
    try:
        for batch in batches:
            out[done : done + len(batch)] = batch.numpy()
            done += len(batch)
    except tf.errors.OpError:  # a file of the batch at `done` failed: find it and name it
        for i in range(done, len(paths)):
            out[i] = load_image(paths[i], size, mode)
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
