"""Folding inference-mode batch normalisation (and explicit zero padding) into convolutions.

In inference a BatchNormalization is an affine map per channel,

    y = gamma (x - mean) / sqrt(var + eps) + beta = s x + (beta - s mean),  s = gamma / sqrt(var + eps),

and when x is the output of a convolution with kernel W and bias b, the pair is one
convolution with kernel s W (s scaling each output channel) and bias s (b - mean) + beta.
Keras 3 runs a BatchNormalization as separate element-wise ops (multiply, subtract, add,
rsqrt) over the whole activation, so folding removes two passes over each of
EfficientNetB0's 49 normalised activations; the exported serving graph uses it.

A ZeroPadding2D before a "valid" strided convolution (EfficientNet's `correct_pad`) is
folded too when its pads are the ones "same" padding would add: the convolution then
pads as it reads, without a padded copy of the activation.
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
    """Names of the ZeroPadding2D layers whose one consumer is a "valid" convolution
    that pads exactly so with "same"."""
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
    """A copy of a functional `model` with each conv -> BatchNormalization pair folded into one.

    A pair folds when the BatchNormalization normalises the channel axis of the output of
    a Conv2D or DepthwiseConv2D (channels last, no activation of its own) that feeds
    nothing else. A ZeroPadding2D whose pads are the ones "same" padding would add to
    the "valid" convolution after it folds into that convolution. Other layers are
    copied with their weights. The copy computes what `model(x, training=False)`
    computes, up to float rounding; it is for inference only (its batch statistics are
    gone) and does not follow later changes to `model`'s weights.

    Args:
        model: keras.Model, functional or Sequential.

    Returns:
        (keras.Model, int): the copy and how many layers were folded away. With none
        to fold, `model` itself and 0.
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
        target = copy.get_layer(layer.name)
        if layer.name in pairs:
            target.set_weights(list(_folded_weights(layer, pairs[layer.name])))
        else:
            target.set_weights(layer.get_weights())
    return copy, len(folded_away)
