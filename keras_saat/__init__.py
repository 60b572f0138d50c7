"""keras-saat: Show, Attend and Tell (Xu et al., 2015) in Keras 3 / TensorFlow.

import keras, keras_saat
data = keras_saat.data.read_captions("captions.csv")
model = keras_saat.Captioner.from_records(data.train, backbone_weights="imagenet")
model.compile()
model.fit(data.train, validation_data=data.val, epochs=10)
keras.saving.load_model("best.keras").generate("photo.png")

The names below load on first use, so `keras_saat.serving`'s client and
development server run without importing Keras or the model code, and
`keras_saat.tune_malloc()` and `keras_saat.prefer_onednn()` can run before TensorFlow
is imported. The Keras classes are registered all the same, as soon as Keras is
imported (`keras_saat.registration`), so `keras.saving.load_model` reads our files.
"""

from keras_saat import data as data  # light: its names load on first use
from keras_saat._lazy import lazy_getattr
from keras_saat.registration import register_with_keras

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

__all__ = sorted([*_EXPORTS, "__version__", "data"])


__getattr__ = lazy_getattr("keras_saat", _EXPORTS, globals())


def __dir__():
    return __all__


register_with_keras()
