"""Backbone registry: name -> builder, feature layer, preprocessing, default size.

Entries: VGG16/19 (the paper's conv5_3 map), InceptionV3, keras.applications
EfficientNetB0-B7 and V2, EfficientNet-Lite0/1/2 (`efficientnet_lite.py`), qubvel's
`efficientnet` package when installed, and `shapes_cnn` / `shapes_cnn_small` (with
`_norm` variants) for Shapes scenes. Built-in entries are registered without importing
Keras, so a config's backbone is checked before TensorFlow loads.
"""

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path

from keras_saat.encoders import shapes_cnn
from keras_saat.errors import KerasSaatError
from keras_saat.registries import Registry


@dataclasses.dataclass(frozen=True)
class BackboneSpec:
    """How to build one backbone.

    Args:
        name: str. Registry name.
        builder: callable(input_shape, weights) -> keras.Model. `weights` is "imagenet" or None.
        feature_layer: str. Name of the layer whose output is the annotation map.
        preprocessing: str. Key of `keras_saat.encoders.preprocessing.PREPROCESSING`.
        default_image_size: int. Input side the backbone was designed for.
        imagenet: bool. Whether "imagenet" weights exist for it.
    """

    name: str
    builder: Callable
    feature_layer: str
    preprocessing: str
    default_image_size: int
    imagenet: bool = True


def _install_hint(name):
    if name.startswith("efficientnet_qubvel"):
        return "; the qubvel backbones need `pip install keras-saat[efficientnet]`"
    return ""


BACKBONES = Registry("backbone", case_sensitive=False, hint=_install_hint)
get_backbone_spec = BACKBONES.get


def register_backbone(spec):
    """Adds (or replaces) a backbone in the registry, under `spec.name`; returns the spec."""
    return BACKBONES.register(spec.name, spec)


def _applications(constructor_name):
    def build(input_shape, weights):
        import keras

        constructor = getattr(keras.applications, constructor_name)
        return constructor(include_top=False, weights=weights, input_shape=input_shape)

    return build


def _qubvel(constructor_name):
    def build(input_shape, weights):
        import efficientnet.tfkeras as efn

        return getattr(efn, constructor_name)(
            include_top=False, weights=weights, input_shape=input_shape
        )

    return build


def _shapes(name):
    def build(input_shape, weights):  # "imagenet" is refused before: the spec says it has none
        return shapes_cnn.build_shapes_cnn(input_shape, **shapes_cnn.VARIANTS[name])

    return build


register_backbone(BackboneSpec("vgg16", _applications("VGG16"), "block5_conv3", "caffe", 224))
register_backbone(BackboneSpec("vgg19", _applications("VGG19"), "block5_conv4", "caffe", 224))
# The TensorFlow image captioning tutorial's encoder: 8x8x2048 at 299.
register_backbone(
    BackboneSpec("inceptionv3", _applications("InceptionV3"), "mixed10", "inception", 299)
)
_EFFICIENTNET_SIZES = (224, 240, 260, 300, 380, 456, 528, 600)
_EFFICIENTNET_V2_SIZES = {"b0": 224, "b1": 240, "b2": 260, "b3": 300, "s": 384, "m": 480, "l": 480}


def _top(name, builder, preprocessing, size):
    """Registers a backbone whose annotation map is its "top_activation"."""
    register_backbone(BackboneSpec(name, builder, "top_activation", preprocessing, size))


for _i, _size in enumerate(_EFFICIENTNET_SIZES):
    _top(f"efficientnetb{_i}", _applications(f"EfficientNetB{_i}"), "raw", _size)
for _suffix, _size in _EFFICIENTNET_V2_SIZES.items():
    _top(
        f"efficientnetv2{_suffix}", _applications(f"EfficientNetV2{_suffix.upper()}"), "raw", _size
    )
if importlib.util.find_spec("efficientnet") is not None:
    for _i, _size in enumerate(_EFFICIENTNET_SIZES):
        _top(f"efficientnet_qubvel_b{_i}", _qubvel(f"EfficientNetB{_i}"), "torch", _size)


def _lite(variant):
    def build(input_shape, weights):
        from keras_saat.encoders import efficientnet_lite

        return efficientnet_lite.EfficientNetLite(
            variant, include_top=False, weights=weights, input_shape=input_shape
        )

    return build


# EfficientNet-Lite: the 14x14 map by default (the paper's lower map), the 7x7 one as `_top`.
for _i, _size in enumerate((224, 240, 260)):
    _variant = f"efficientnet_lite{_i}"
    register_backbone(
        BackboneSpec(_variant, _lite(_variant), "block6a_expand_activation", "lite", _size)
    )
    _top(f"{_variant}_top", _lite(_variant), "lite", _size)
for _name in shapes_cnn.VARIANTS:
    register_backbone(
        BackboneSpec(_name, _shapes(_name), shapes_cnn.FEATURE_LAYER, "unit", 128, imagenet=False)
    )


def available_backbones():
    """Sorted names of the registered backbones."""
    return sorted(BACKBONES.names())


def build_feature_model(name, image_size=None, weights=None):
    """Builds a backbone cut at its feature layer: (B, S, S, 3) preprocessed -> (B, h, w, C).

    Args:
        name: str. Registry name.
        image_size: int or None. Input side; None or 0 = the backbone's default.
        weights: "imagenet", "shapes" (a Shapes CNN packaged with the library), None, or
            the path of a `.weights.h5` file of the full backbone. Defaults to None.
    """
    import keras

    spec = get_backbone_spec(name)
    size = image_size or spec.default_image_size
    local = packaged = None
    if weights == "shapes":  # the library's own pre-trained Shapes CNN
        from keras_saat.encoders.packaged_shapes_cnn import packaged_backbone

        packaged, weights = packaged_backbone(spec.name), None
    elif weights not in (None, "imagenet"):
        local = Path(weights)
        if not local.is_file():
            raise KerasSaatError(f"backbone weights file not found: {local}")
        weights = None
    if weights == "imagenet" and not spec.imagenet:
        raise KerasSaatError(f"backbone '{spec.name}' has no ImageNet weights")
    full = spec.builder((size, size, 3), weights)
    if packaged is not None:
        full.set_weights(packaged.get_weights())
    if local is not None:
        try:
            full.load_weights(str(local))
        except Exception as err:  # h5py and Keras raise many kinds here
            raise KerasSaatError(
                f"cannot load backbone weights {local} into '{spec.name}' at {size}x{size}: {err}"
            ) from None
    try:
        feature = full.get_layer(spec.feature_layer).output
    except ValueError:
        raise KerasSaatError(
            f"backbone '{spec.name}' has no layer '{spec.feature_layer}'"
        ) from None
    return keras.Model(full.input, feature, name=f"{spec.name}_features")
