"""Image encoders: the backbone registry and the ImageEncoder layer, loaded on first use."""

from keras_saat._lazy import lazy_getattr

_EXPORTS = {
    "AddCoords": "keras_saat.encoders.add_coords",
    "BackboneSpec": "keras_saat.encoders.registry",
    "ImageEncoder": "keras_saat.encoders.image_encoder",
    "available_backbones": "keras_saat.encoders.registry",
    "build_feature_model": "keras_saat.encoders.registry",
    "get_backbone_spec": "keras_saat.encoders.registry",
    "register_backbone": "keras_saat.encoders.registry",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("keras_saat.encoders", _EXPORTS, globals())


def __dir__():
    return __all__
