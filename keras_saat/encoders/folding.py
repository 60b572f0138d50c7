"""Folding inference-mode batch normalisation (and explicit zero padding) into convolutions.

In inference y = s x + (beta - s mean) with s = gamma / sqrt(var + eps), so a conv with
kernel W and bias b followed by it is one conv with kernel s W and bias
s (b - mean) + beta. Keras 3 runs BatchNormalization as separate element-wise passes, so
the serving graph folds them. A ZeroPadding2D before a "valid" strided conv
(EfficientNet's `correct_pad`) folds too when its pads are those "same" would add.
"""

import keras
import numpy as np

from keras_saat.errors import KerasSaatError

_CONVOLUTIONS = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)


@keras.saving.register_keras_serializable(package="keras_saat")
class FoldedAway(keras.layers.Layer):
    """Stands where a folded BatchNormalization stood: returns its input unchanged."""

    def call(self, inputs, training=None, mask=None):
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape


def _producer(layer):
    """The layer whose output `layer` takes, or None when that is not one single layer."""
    if len(layer._inbound_nodes) != 1:  # a shared layer: leave it
        return None
    history = getattr(layer.input, "_keras_history", None)
    return history.operation if history is not None else None


def _same_pads(size, kernel, stride, dilation):
    """(before, after): the zeros "same" padding adds to one spatial dimension."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _foldable_pads(model):
    """Names of the ZeroPadding2D layers whose one consumer is a "valid" convolution that
    pads exactly as "same" would."""
    pads = set()
    for conv in model.layers:
        if not isinstance(conv, _CONVOLUTIONS) or conv.padding != "valid":
            continue
        pad = _producer(conv)
        if (
            not isinstance(pad, keras.layers.ZeroPadding2D)
            or len(pad._inbound_nodes) != 1
            or len(pad._outbound_nodes) != 1
            or pad.data_format != "channels_last"
            or conv.data_format != "channels_last"
        ):
            continue
        _, height, width, _ = pad.input.shape
        if height is None or width is None:
            continue
        same = tuple(
            _same_pads(size, k, s, d)
            for size, k, s, d in zip(
                (height, width), conv.kernel_size, conv.strides, conv.dilation_rate, strict=True
            )
        )
        if tuple(map(tuple, pad.padding)) == same:
            pads.add(pad.name)
    return pads


def _foldable_pairs(model):
    """{conv name: the BatchNormalization that alone consumes its output}."""
    pairs = {}
    for layer in model.layers:
        if not isinstance(layer, keras.layers.BatchNormalization):
            continue
        conv = _producer(layer)
        if (
            isinstance(conv, _CONVOLUTIONS)
            and len(conv._inbound_nodes) == 1
            and len(conv._outbound_nodes) == 1
            and conv.data_format == "channels_last"
            and conv.activation in (None, keras.activations.linear)
            and layer.axis in (-1, len(layer.input.shape) - 1)
        ):
            pairs[conv.name] = layer
    return pairs


def _folded_weights(conv, norm):
    """(kernel, bias) of the convolution that computes norm(conv(x)) in inference."""
    mean = np.asarray(norm.moving_mean, np.float64)
    variance = np.asarray(norm.moving_variance, np.float64)
    gamma = np.asarray(norm.gamma, np.float64) if norm.scale else np.ones_like(mean)
    beta = np.asarray(norm.beta, np.float64) if norm.center else np.zeros_like(mean)
    scale = gamma / np.sqrt(variance + norm.epsilon)
    kernel = np.asarray(conv.kernel, np.float64)
    if isinstance(conv, keras.layers.DepthwiseConv2D):  # (kh, kw, in, multiplier)
        kernel = kernel * scale.reshape(kernel.shape[2], kernel.shape[3])
    else:  # (kh, kw, in / groups, out)
        kernel = kernel * scale
    bias = np.asarray(conv.bias, np.float64) if conv.use_bias else np.zeros_like(mean)
    dtype = conv.variable_dtype
    return kernel.astype(dtype), ((bias - mean) * scale + beta).astype(dtype)


def fold_batch_norms(model):
    """(a copy of a functional or Sequential `model` with each conv -> BatchNormalization
    pair folded into one, how many layers were folded away); `model` and 0 with none.

    A pair folds when the norm alone consumes a Conv2D or DepthwiseConv2D's output
    (channels last, no activation); "same"-equivalent zero padding folds into the conv
    after it. The copy computes `model(x, training=False)` up to float rounding, for
    inference only, from a snapshot of the weights.
    """
    pairs = _foldable_pairs(model)
    pads = _foldable_pads(model)
    folded_away = {norm.name for norm in pairs.values()} | pads
    if not folded_away:
        return model, 0
    padded_convs = {
        layer.name
        for layer in model.layers
        if isinstance(layer, _CONVOLUTIONS) and getattr(_producer(layer), "name", None) in pads
    }

    def clone(layer):
        if layer.name in folded_away:
            return FoldedAway(name=layer.name)
        config = layer.get_config()
        if layer.name in pairs:
            config["use_bias"] = True
        if layer.name in padded_convs:
            config["padding"] = "same"
        return layer.__class__.from_config(config)

    try:
        copy = keras.models.clone_model(model, clone_function=clone)
    except Exception as err:  # Keras raises several kinds for models it cannot clone
        raise KerasSaatError(
            f"cannot fold the batch norms of {model.name}: the model cannot be cloned ({err})"
        ) from None
    for layer in model.layers:
        if layer.name in folded_away or not layer.weights:
            continue
        folded = layer.name in pairs
        weights = _folded_weights(layer, pairs[layer.name]) if folded else layer.get_weights()
        copy.get_layer(layer.name).set_weights(list(weights))
    return copy, len(folded_away)
