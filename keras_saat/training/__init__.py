"""Training: the GradientTape trainer (XLA, tf.distribute, resume) and the experiment pipeline."""

from keras_saat.training.experiment import evaluate, train
from keras_saat.training.trainer import Trainer, make_strategy, train_loop

__all__ = ["Trainer", "evaluate", "make_strategy", "train", "train_loop"]
