"""Image encoders: the backbone registry and the ImageEncoder layer."""

from keras_saat.encoders.add_coords import AddCoords
from keras_saat.encoders.image_encoder import ImageEncoder
from keras_saat.encoders.registry import (
    BackboneSpec,
    available_backbones,
    build_feature_model,
    get_backbone_spec,
    register_backbone,
)

__all__ = [
    "AddCoords",
    "BackboneSpec",
    "ImageEncoder",
    "available_backbones",
    "build_feature_model",
    "get_backbone_spec",
    "register_backbone",
]
