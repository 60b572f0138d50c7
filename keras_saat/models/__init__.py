"""Models."""

from keras_saat.models.captioner import Captioner
from keras_saat.models.factories import build_captioner, load_captioner

__all__ = ["Captioner", "build_captioner", "load_captioner"]
