"""Real photographs with known ImageNet classes, from packages the tests install.

Each entry: the file (inside an installed package), the ImageNet class indices that
name what it shows, and where it comes from with its licence.
"""

import importlib.util
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_saat.images.decoding import decode_image


def _package_file(package, *parts):
    return Path(importlib.util.find_spec(package).origin).parent.joinpath(*parts)


PHOTOS = {
    "chelsea": (
        ("skimage", "data", "chelsea.png"),
        {281, 282, 285},  # tabby, tiger cat, Egyptian cat
        "scikit-image skimage/data/chelsea.png; CC0, Stefan van der Walt",
    ),
    "coffee": (
        ("skimage", "data", "coffee.png"),
        {967, 968},  # espresso, cup
        "scikit-image skimage/data/coffee.png; CC0, Rachel Michetti",
    ),
    "rocket": (
        ("skimage", "data", "rocket.jpg"),
        {657, 744, 812},  # missile, projectile, space shuttle
        "scikit-image skimage/data/rocket.jpg; public domain, SpaceX",
    ),
    "grace_hopper": (
        ("matplotlib", "mpl-data", "sample_data", "grace_hopper.jpg"),
        {652, 834, 457},  # military uniform, suit, bow tie
        "matplotlib mpl-data/sample_data/grace_hopper.jpg; public domain, U.S. Navy",
    ),
    "camera": (
        ("skimage", "data", "camera.png"),
        {872, 759, 732},  # tripod, reflex camera, Polaroid camera
        "scikit-image skimage/data/camera.png; CC0, Lav Varshney",
    ),
}


def photo_path(name):
    package, *parts = PHOTOS[name][0]
    return _package_file(package, *parts)


def photo_pixels(name, size):
    """The photo as the captioner sees it: decoded and centre-cropped to size x size."""
    return decode_image(tf.io.read_file(str(photo_path(name))), size, "crop").numpy()


def golden_inputs(size):
    """(names, (N, size, size, 3) pixels): every photo, uniform noise and three ramps.

    `tools/efficientnet_lite_numerics.py` feeds these to timm and stores its logits;
    the tests feed them to the Keras model.
    """
    pixels = [photo_pixels(name, size) for name in PHOTOS]
    pixels.append(np.random.default_rng(0).uniform(0, 255, (size, size, 3)).astype(np.float32))
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    ramps = [
        np.add.outer(ramp, ramp) / 2,
        np.tile(ramp, (size, 1)),
        np.tile(ramp[:, None], (1, size)),
    ]
    pixels.append(np.stack(ramps, -1))
    return [*PHOTOS, "noise", "ramps"], np.stack(pixels).astype(np.float32)
