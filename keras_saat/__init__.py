"""keras-saat: Show, Attend and Tell (Xu et al., 2015) in Keras 3 / TensorFlow.

from keras_saat import Captioner, load_captioner
model = load_captioner("runs/demo")
print(model.generate("photo.png"))
"""

__version__ = "0.1.0"

from keras_saat.config import ExperimentConfig, load_config  # noqa: E402
from keras_saat.errors import KerasSaatError  # noqa: E402
from keras_saat.models.captioner import Captioner, build_captioner, load_captioner  # noqa: E402
from keras_saat.text.vocabulary import Vocabulary  # noqa: E402

__all__ = [
    "Captioner",
    "ExperimentConfig",
    "KerasSaatError",
    "Vocabulary",
    "__version__",
    "build_captioner",
    "load_captioner",
    "load_config",
]
