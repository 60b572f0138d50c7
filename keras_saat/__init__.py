"""keras-saat: Show, Attend and Tell (Xu et al., 2015) in Keras 3 / TensorFlow.

from keras_saat import Captioner, load_captioner
model = load_captioner("runs/demo")
print(model.generate("photo.png"))

The names below load on first use, so `keras_saat.serving`'s client and
development server run without importing Keras or the model code, and
`keras_saat.tune_malloc()` and `keras_saat.prefer_onednn()` can run before TensorFlow
is imported.
"""

from keras_saat._lazy import lazy_getattr

__version__ = "0.1.0"

_EXPORTS = {
    "Captioner": "keras_saat.models.captioner",
    "ExperimentConfig": "keras_saat.config",
    "KerasSaatError": "keras_saat.errors",
    "Vocabulary": "keras_saat.text.vocabulary",
    "build_captioner": "keras_saat.models.factories",
    "load_captioner": "keras_saat.models.factories",
    "load_config": "keras_saat.config",
    "prefer_onednn": "keras_saat.runtime.cpu_kernels",
    "tune_malloc": "keras_saat.runtime.memory",
}

__all__ = sorted([*_EXPORTS, "__version__"])


__getattr__ = lazy_getattr("keras_saat", _EXPORTS, globals())


def __dir__():
    return __all__
