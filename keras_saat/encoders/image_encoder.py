"""ImageEncoder: pixels -> the backbone's annotation map, flattened to (L, C)."""

import weakref

import keras
import tensorflow as tf
from keras import ops

from keras_saat.encoders.folding import fold_batch_norms
from keras_saat.encoders.preprocessing import PREPROCESSING
from keras_saat.encoders.registry import build_feature_model, get_backbone_spec
from keras_saat.runtime.cpu_kernels import onednn_enabled

# Images per backbone call in `ImageEncoder.infer`, and calls at once: a whole batch's
# activations stream through memory at every element-wise op, unless oneDNN fuses them.
INFERENCE_CHUNK = 2
INFERENCE_PARALLEL = 2


def default_inference_chunk():
    """`ImageEncoder.infer`'s chunk size here: 0 (one call) with oneDNN, else INFERENCE_CHUNK."""
    return 0 if onednn_enabled() else INFERENCE_CHUNK


@keras.saving.register_keras_serializable(package="keras_saat")
class ImageEncoder(keras.layers.Layer):
    """Runs a (by default frozen) backbone and flattens its feature map (Sec. 3.1.1).

    Input: float RGB pixels in [0, 255], (batch, S, S, 3). Output: (batch, L, C)
    with L = h * w locations in row-major order (row 0 first).

    Args:
        backbone: str. Registry name (`keras_saat.encoders.available_backbones()`).
            Defaults to "shapes_cnn".
        image_size: int or None. Input side; None or 0 = the backbone's default. Defaults to None.
        weights: "imagenet", "shapes" (a packaged Shapes CNN), None or a local weights
            file, used at construction only. Defaults to None.
        trainable_layers: int. How many of the backbone's last weighted layers train
            (0 = frozen, the paper's setting). Defaults to 0.
        feature_model: keras.Model or None. Use this backbone (cut at its feature layer)
            instead of building one. Defaults to None.

    Example:
        ```python
        import numpy as np
        from keras_saat.encoders import ImageEncoder

        encoder = ImageEncoder("shapes_cnn")
        encoder(np.zeros((1, 128, 128, 3), "float32")).shape  # (1, 64, 128): L = 8 x 8, C = 128
        ```
    """

    def __init__(
        self,
        backbone="shapes_cnn",
        image_size=None,
        weights=None,
        trainable_layers=0,
        feature_model=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        spec = get_backbone_spec(backbone)
        self.backbone_name = spec.name
        self.image_size = int(image_size or spec.default_image_size)
        self.trainable_layers = int(trainable_layers)
        self.preprocessing = spec.preprocessing
        # `feature_model` (not serialised) is for `folded()`: an already built backbone.
        self.feature_model = feature_model or build_feature_model(
            spec.name, self.image_size, weights
        )
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

    def infer(self, pixels, chunk_size=None, parallel=INFERENCE_PARALLEL):
        """Inference forward in chunks: the same (B, L, C) values as `call`, faster on big
        batches; the remainder makes one smaller call, so nothing is padded. Works with an
        unknown batch size; for training use `call`.

        Args:
            pixels: (B, S, S, 3) float RGB in [0, 255].
            chunk_size: int or None. Images per backbone call; 0 = the whole batch in one
                call; None = `default_inference_chunk()`. Defaults to None.
            parallel: int. Chunks run at once. Defaults to INFERENCE_PARALLEL (2).
        """
        chunk_size = default_inference_chunk() if chunk_size is None else int(chunk_size)
        if chunk_size < 0 or int(parallel) < 1:
            raise ValueError(
                f"chunk_size must be >= 0 and parallel >= 1; got {chunk_size} and {parallel}"
            )
        pixels = tf.convert_to_tensor(pixels, tf.float32)
        if chunk_size == 0:
            return self(pixels)
        batch = tf.shape(pixels)[0]
        whole = batch // chunk_size * chunk_size
        shape = [self.num_locations, self.feature_channels]  # (L, C)
        chunks = tf.reshape(
            pixels[:whole], tf.concat([[-1, chunk_size], tf.shape(pixels)[1:]], 0)
        )  # (B // c, c, S, S, 3)
        output = tf.TensorSpec([chunk_size, *shape], self.compute_dtype)
        mapped = tf.map_fn(
            self, chunks, parallel_iterations=int(parallel), fn_output_signature=output
        )  # (B // c, c, L, C)
        head = tf.reshape(mapped, [-1, *shape])
        # No call on an empty tail: oneDNN's kernels (TF_ENABLE_ONEDNN_OPTS=1) reject batch 0.
        tail = tf.cond(
            whole < batch,
            lambda: self(pixels[whole:]),
            lambda: tf.zeros([0, *shape], self.compute_dtype),
        )
        return tf.concat([head, tail], 0)

    def compiled(self, dtype="float32"):
        """`infer` as one traced tf.function per output dtype (see `compiled_encoder`)."""
        return compiled_encoder(self, dtype)

    def folded(self):
        """An inference copy with the backbone's batch norms folded into its convolutions
        (`keras_saat.encoders.folding`); returns (encoder, pairs folded), `self` when none."""
        feature_model, count = fold_batch_norms(self.feature_model)
        if not count:
            return self, 0
        copy = ImageEncoder(
            self.backbone_name,
            self.image_size,
            trainable_layers=0,
            feature_model=feature_model,
            name=f"{self.name}_folded",
        )
        return copy, count

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


_COMPILED = weakref.WeakKeyDictionary()


def compiled_encoder(encoder, dtype="float32"):
    """`encoder.infer` as one tf.function per encoder and output dtype, traced once and
    shared by extraction and `generate`; the cast runs in the graph (NumPy's is slow)."""
    functions = _COMPILED.setdefault(encoder, {})
    if dtype not in functions:
        functions[dtype] = tf.function(
            lambda pixels: tf.cast(encoder.infer(pixels), dtype),
            jit_compile=False,
            reduce_retracing=True,
        )
    return functions[dtype]
