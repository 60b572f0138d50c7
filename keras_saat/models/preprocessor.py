"""ImagePreprocessor: image files, encoded bytes or pixels -> the model's input pixels."""

from pathlib import Path

import numpy as np

from keras_saat.data.images import decode_image, load_images, resize_image
from keras_saat.errors import KerasSaatError


class ImagePreprocessor:
    """Turns what a user has into (B, S, S, 3) float32 pixels in [0, 255], one resize rule.

    The rule is the one training used (`data.resize`), so an image is seen the same way
    in the feature cache, `Captioner.generate` and the exported graph.

    Args:
        image_size: int. S, the model's input side.
        resize: str. "crop", "pad" or "stretch" (`keras_saat.data.images.resize_image`).
            Defaults to "crop".
    """

    def __init__(self, image_size, resize="crop"):
        self.image_size = int(image_size)
        self.resize = resize

    def __call__(self, images):
        """Pixels for a path, a list of paths, encoded image bytes (or a list of them),
        an (H, W, 3) image or a (B, H, W, 3) batch of any size."""
        if isinstance(images, (str, Path)):
            images = [images]
        if isinstance(images, bytes):
            images = [images]
        if isinstance(images, (list, tuple)) and images:
            if all(isinstance(i, (str, Path)) for i in images):
                return load_images(list(images), self.image_size, self.resize)
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

    def _decode(self, encoded):
        import tensorflow as tf

        try:
            return decode_image(encoded, self.image_size, self.resize).numpy()
        except tf.errors.InvalidArgumentError as err:
            message = err.message.splitlines()[0]
            raise KerasSaatError(f"cannot decode image bytes: {message}") from None
