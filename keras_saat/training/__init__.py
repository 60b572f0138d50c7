"""Training: the GradientTape trainer, its loop and the optimiser; a whole experiment is
`keras_saat.experiment`."""

from keras_saat.training.loop import train_loop
from keras_saat.training.optimization import build_optimizer
from keras_saat.training.trainer import Trainer, make_strategy

__all__ = ["Trainer", "build_optimizer", "make_strategy", "train_loop"]
