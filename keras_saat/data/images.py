"""Reading image files into pixel arrays."""

import numpy as np
from PIL import Image, UnidentifiedImageError

from keras_saat.errors import KerasSaatError


def load_image(path, size):
    """Reads an image file as (size, size, 3) uint8 RGB (bilinear resize).

    Raises a KerasSaatError naming the file when it is missing or not an image.
    """
    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
            if image.size != (size, size):
                image = image.resize((size, size), Image.BILINEAR)
            return np.asarray(image, dtype=np.uint8)
    except FileNotFoundError:
        raise KerasSaatError(f"image file not found: {path}") from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise KerasSaatError(f"cannot read image {path}: {err}") from None


def load_images(paths, size):
    """Stacks `load_image` over paths: (N, size, size, 3) uint8."""
    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for i, path in enumerate(paths):
        out[i] = load_image(path, size)
    return out
