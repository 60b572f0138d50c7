"""Models."""

from keras_saat.models.captioner import Captioner, build_captioner, load_captioner

__all__ = ["Captioner", "build_captioner", "load_captioner"]
