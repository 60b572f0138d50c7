"""An experiment: from a config to a trained, saved and scored model, and back.

train(config, workdir)             # `keras-saat train` / `demo`
evaluate(workdir, split="test")    # `keras-saat evaluate`
trained_model(workdir)             # the model and the config it trained with
export_workdir(workdir, out)       # `keras-saat export`
"""

from keras_saat.experiment.preparation import extract_only
from keras_saat.experiment.scoring import evaluate
from keras_saat.experiment.trained_models import export_workdir, trained_model
from keras_saat.experiment.training_run import train

__all__ = ["evaluate", "export_workdir", "extract_only", "train", "trained_model"]
