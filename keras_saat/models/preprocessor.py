"""ImagePreprocessor: image files, encoded bytes or pixels -> the model's input pixels."""

from pathlib import Path

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.images.decoded_batches import decoded_batches
from keras_saat.images.decoding import decode_error, decode_image, load_images, resize_image
from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS


class ImagePreprocessor:
    """Turns what a user has into (B, S, S, 3) float32 pixels in [0, 255] with training's
    resize rule.

    Args:
        image_size: int. S, the model's input side.
        resize: str. "crop", "pad" or "stretch" (`keras_saat.images.decoding.resize_image`).
            Defaults to "crop".
        max_pixels: int. Largest width x height an image header may declare for its
            image to be decoded (`export.max_pixels`). Defaults to DEFAULT_MAX_PIXELS.

    Example:
        ```python
        from keras_saat.models.preprocessor import ImagePreprocessor

        pixels = ImagePreprocessor(128, "pad")(["scene.png"])  # (1, 128, 128, 3) float32
        ```
    """

    def __init__(self, image_size, resize="crop", max_pixels=DEFAULT_MAX_PIXELS):
        self.image_size = int(image_size)
        self.resize = resize
        self.max_pixels = int(max_pixels)

    def __call__(self, images):
        """Pixels for a path, a list of paths, encoded image bytes (or a list of them),
        an (H, W, 3) image or a (B, H, W, 3) batch of any size."""
        if isinstance(images, (str, Path, bytes)):
            images = [images]
        if isinstance(images, (list, tuple)) and images:
            if all(isinstance(i, (str, Path)) for i in images):
                return load_images(list(images), self.image_size, self.resize, self.max_pixels)
            if all(isinstance(i, bytes) for i in images):
                return np.stack([self._decode(i) for i in images])
        pixels = np.asarray(images)
        if pixels.ndim == 3:
            pixels = pixels[None]
        if pixels.ndim != 4 or pixels.shape[-1] != 3:
            raise KerasSaatError(
                f"images must be (batch, H, W, 3) pixels, paths or encoded bytes; "
                f"got shape {pixels.shape}"
            )
        if pixels.shape[1:3] != (self.image_size, self.image_size):
            return np.stack([resize_image(p, self.image_size, self.resize).numpy() for p in pixels])
        return pixels.astype(np.float32, copy=False)

    def batches(self, images, batch_size):
        """Batches of input pixels for a stream of image files or encoded bytes, decoded
        one batch ahead by the exported model's decoding graph.

        Args:
            images: iterable of paths or encoded image bytes (a generator is fine).
            batch_size: int. Images per batch.

        Yields:
            dicts: image (list of str: the path, or "#<index>" for bytes), pixels
            (B, S, S, 3) float32 tensor, valid (B,) bool array, error (list of str).
        """
        return decoded_batches(images, self.image_size, self.resize, self.max_pixels, batch_size)

    def rows(self, images, batch_size):
        """Dicts of image (names), pixels, valid and error, `batch_size` rows each, for
        pixels (rows named by index) or a stream of files or encoded bytes (`batches`)."""
        if is_pixels(images):
            pixels = self(images)
            for start in range(0, len(pixels), batch_size):
                yield _valid_rows(start, "pixels", pixels[start : start + batch_size])
            return
        if isinstance(images, (str, Path, bytes, bytearray)):
            images = [images]
        yield from self.batches(images, batch_size)

    def _decode(self, encoded):
        import tensorflow as tf

        try:
            return decode_image(encoded, self.image_size, self.resize, self.max_pixels).numpy()
        except tf.errors.InvalidArgumentError as err:
            raise KerasSaatError(f"cannot decode image bytes: {decode_error(err)}") from None


def feature_batches(features, batch_size):
    """`rows`' dicts for backbone features (B, L, C) instead of images."""
    features = np.asarray(features, np.float32)
    for start in range(0, len(features), batch_size):
        yield _valid_rows(start, "features", features[start : start + batch_size])


def is_pixels(images):
    """Whether `images` is pixel data (an array, or a list of arrays), not files or bytes."""
    import tensorflow as tf

    if isinstance(images, np.ndarray) or tf.is_tensor(images):
        return True
    return isinstance(images, (list, tuple)) and bool(images) and np.ndim(images[0]) >= 2


def _valid_rows(start, key, chunk):
    rows = len(chunk)
    names = [str(i) for i in range(start, start + rows)]
    return {"image": names, key: chunk, "valid": [True] * rows, "error": [""] * rows}
