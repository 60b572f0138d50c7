"""ImageEncoder: pixels -> the backbone's annotation map, flattened to (L, C)."""

import keras
from keras import ops

from keras_saat.encoders.preprocessing import PREPROCESSING
from keras_saat.encoders.registry import build_feature_model, get_backbone_spec


@keras.saving.register_keras_serializable(package="keras_saat")
class ImageEncoder(keras.layers.Layer):
    """Runs a (by default frozen) backbone and flattens its feature map (Sec. 3.1.1).

    Input: float RGB pixels in [0, 255], (batch, S, S, 3). Output: (batch, L, C)
    with L = h * w locations in row-major order (row 0 first).

    Args:
        backbone: str. Registry name (`keras_saat.encoders.available_backbones()`). Defaults to "shapes_cnn".
        image_size: int or None. Input side; None or 0 = the backbone's default. Defaults to None.
        weights: "imagenet", None or a local weights file, used at construction only
            (a saved model stores its weights itself). Defaults to None.
        trainable_layers: int. How many of the backbone's last weighted layers train
            (0 = frozen, the paper's setting). Defaults to 0.
    """

    def __init__(
        self, backbone="shapes_cnn", image_size=None, weights=None, trainable_layers=0, **kwargs
    ):
        super().__init__(**kwargs)
        spec = get_backbone_spec(backbone)
        self.backbone_name = spec.name
        self.image_size = int(image_size or spec.default_image_size)
        self.trainable_layers = int(trainable_layers)
        self.preprocessing = spec.preprocessing
        self.feature_model = build_feature_model(spec.name, self.image_size, weights)
        weighted = [layer for layer in self.feature_model.layers if layer.weights]
        for index, layer in enumerate(weighted):
            layer.trainable = index >= len(weighted) - self.trainable_layers
        _, height, width, channels = self.feature_model.output.shape
        self.grid_shape = (int(height), int(width))
        self.num_locations = int(height) * int(width)
        self.feature_channels = int(channels)
        self.built = True

    def preprocess(self, pixels):
        return PREPROCESSING[self.preprocessing](ops.cast(pixels, "float32"))

    def call(self, pixels):
        # Always inference mode: batch-norm statistics stay frozen even when top layers train.
        features = self.feature_model(self.preprocess(pixels), training=False)  # (B, h, w, C)
        return ops.reshape(features, (-1, self.num_locations, self.feature_channels))  # (B, L, C)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_locations, self.feature_channels)

    def get_config(self):
        config = super().get_config()
        config.update(
            backbone=self.backbone_name,
            image_size=self.image_size,
            weights=None,
            trainable_layers=self.trainable_layers,
        )
        return config
