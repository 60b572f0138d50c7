"""Photometric augmentation: Keras's own preprocessing layers, with ranges that vary a
picture as light, exposure and a camera vary it and leave every colour its name.

The Shapes CNN's pre-training runs each batch through it, and the Shapes world's varied
training scenes (`write_shapes_dataset(varied=...)`) are drawn through it
(docs/performance.md, "Robustness").
"""

# The ranges, by what they cover (pixels in [0, 1]):
BRIGHTNESS = 0.15  # exposure: every pixel moved by up to 0.15 (38 of 255), up or down
# contrast x0.4 to x1.3 (about the mean): lower than the brighter side, because a dull
# picture is what the world's CNN and decoder confuse (objects missed or doubled)
CONTRAST = (0.6, 0.3)
HUE = 0.06  # a colour cast: hue turned by up to 11 degrees either way (red's nearest
# other Shapes colour, purple, is 85 degrees away)
SATURATION = (0.4, 0.6)  # saturation scaled from about x0.67 to x1.5


def photometric_augmentation(seed=0):
    """A `keras.Sequential` of `RandomBrightness`, `RandomContrast`, `RandomHue` and
    `RandomSaturation` for (B, H, W, 3) pixels in [0, 1] (call it with `training=True`;
    clip its output to [0, 1]).

    No noise layer: the Shapes world's own noise (sigma 8) already makes its CNN hold under
    sigma 20.

    Args:
        seed: int. The layers' seeds (seed .. seed + 3). Defaults to 0.
    """
    import keras

    return keras.Sequential(
        [
            keras.layers.RandomBrightness(BRIGHTNESS, value_range=(0, 1), seed=seed),
            keras.layers.RandomContrast(CONTRAST, value_range=(0, 1), seed=seed + 1),
            keras.layers.RandomHue(HUE, value_range=(0, 1), seed=seed + 2),
            keras.layers.RandomSaturation(SATURATION, value_range=(0, 1), seed=seed + 3),
        ],
        name="photometric_augmentation",
    )


def augmented_uint8(pixels, seed=0, batch_size=256):
    """(N, H, W, 3) uint8 pixels through `photometric_augmentation`, as uint8."""
    import numpy as np

    augmentation = photometric_augmentation(seed)
    out = np.empty_like(pixels)
    for start in range(0, len(pixels), batch_size):
        batch = pixels[start : start + batch_size].astype(np.float32) / 255
        varied = np.clip(np.asarray(augmentation(batch, training=True)), 0, 1)
        out[start : start + batch_size] = np.rint(varied * 255).astype(np.uint8)
    return out
