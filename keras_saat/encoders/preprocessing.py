"""Backbone input preprocessing of float RGB pixels in [0, 255], shaped (..., 3), as core
TF ops (they export into serving graphs)."""

import tensorflow as tf

_IMAGENET_BGR_MEAN = (103.939, 116.779, 123.68)
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


def caffe(pixels):
    """VGG ("caffe" mode): RGB to BGR, then subtract the ImageNet channel means."""
    return pixels[..., ::-1] - tf.constant(_IMAGENET_BGR_MEAN, pixels.dtype)


def torch(pixels):
    """qubvel EfficientNet ("torch" mode): scale to [0, 1], then ImageNet mean/std."""
    scaled = pixels / 255.0
    return (scaled - tf.constant(_IMAGENET_MEAN, pixels.dtype)) / tf.constant(
        _IMAGENET_STD, pixels.dtype
    )


def inception(pixels):
    """Keras "tf" mode (InceptionV3): scale to [-1, 1]."""
    return pixels / 127.5 - 1.0


def lite(pixels):
    """EfficientNet-Lite: (x - 127) / 128, the mean and scale of its TensorFlow checkpoints."""
    return (pixels - 127.0) / 128.0


def unit(pixels):
    """Scale to [0, 1] (the Shapes CNN)."""
    return pixels / 255.0


def raw(pixels):
    """No change: keras.applications EfficientNets normalise inside the model."""
    return pixels


PREPROCESSING = {
    "caffe": caffe,
    "torch": torch,
    "inception": inception,
    "lite": lite,
    "unit": unit,
    "raw": raw,
}
