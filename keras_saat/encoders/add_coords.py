"""AddCoords: appends pixel-position channels (CoordConv, Liu et al., 2018)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_saat")
class AddCoords(keras.layers.Layer):
    """Appends two channels holding each pixel's x and y position in [-1, 1], so a frozen,
    translation-equivariant CNN can tell a Shapes decoder where an object is."""

    def call(self, images):
        shape = ops.shape(images)
        batch, height, width = shape[0], shape[1], shape[2]
        ys = ops.linspace(-1.0, 1.0, height)
        xs = ops.linspace(-1.0, 1.0, width)
        grid_y = ops.broadcast_to(ys[:, None, None], (height, width, 1))
        grid_x = ops.broadcast_to(xs[None, :, None], (height, width, 1))
        coords = ops.concatenate([grid_x, grid_y], axis=-1)  # (H, W, 2)
        coords = ops.broadcast_to(coords[None], (batch, height, width, 2))
        return ops.concatenate([images, ops.cast(coords, images.dtype)], axis=-1)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], input_shape[-1] + 2)
