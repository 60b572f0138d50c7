"""Photometric augmentation: Keras's own preprocessing layers, with ranges that vary a
picture as light, exposure and a camera vary it and leave every colour its name.

The Shapes CNN's pre-training runs each batch through it (`PhotometricViews`, in its
train step), and the Shapes world's varied training scenes
(`write_shapes_dataset(varied=...)`) are drawn through it.
"""

import keras
import tensorflow as tf

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


@keras.saving.register_keras_serializable(package="keras_saat")
class PhotometricViews(keras.layers.Layer):
    """`photometric_augmentation` and a clip to [0, 1] as one layer, its training call
    compiled by XLA wherever it runs; `training=False` (Keras's `predict`) passes the
    pixels through.

    Keras's `jit_compile="auto"` leaves a CPU's train step to TensorFlow op by op, and
    there the hue and saturation layers' colour-space conversions are a large share of
    the Shapes CNN's pre-training step, which XLA shrinks to a small one. Inside a step
    that XLA compiles anyway (a GPU's "auto") the function is compiled with the rest.

    XLA draws other random numbers than TensorFlow's kernels from the same seeds: the
    views differ from `photometric_augmentation`'s own, seeded and repeatable alike.

    Args:
        seed: int. `photometric_augmentation`'s. Defaults to 0.
        jit_compile: bool. Compile the training call by XLA. Defaults to True.
    """

    def __init__(self, seed=0, jit_compile=True, **kwargs):
        super().__init__(**kwargs)
        self.seed, self.jit_compile = seed, jit_compile
        self.augmentation = photometric_augmentation(seed)
        self._views = tf.function(self._draw, jit_compile=jit_compile, autograph=False)

    def build(self, input_shape):
        self.augmentation.build(input_shape)

    def _draw(self, pixels):
        return keras.ops.clip(self.augmentation(pixels, training=True), 0.0, 1.0)

    def call(self, pixels, training=True):  # as Keras's random layers: views unless told
        return self._views(pixels) if training else pixels

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "seed": self.seed, "jit_compile": self.jit_compile}
