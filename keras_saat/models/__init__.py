"""Models, loaded on first use so importing the package does not import Keras."""

from keras_saat._lazy import lazy_getattr

_EXPORTS = {
    "Captioner": "keras_saat.models.captioner",
    "build_captioner": "keras_saat.models.factories",
    "load_captioner": "keras_saat.models.factories",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("keras_saat.models", _EXPORTS, globals())


def __dir__():
    return __all__
