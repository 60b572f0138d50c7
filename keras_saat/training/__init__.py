"""Training: the GradientTape trainer (XLA, tf.distribute), its loop (checkpoints, exact
resume) and the optimiser. A whole experiment (config -> scored model) is
`keras_saat.experiment`."""

from keras_saat.training.loop import train_loop
from keras_saat.training.optimization import build_optimizer
from keras_saat.training.trainer import Trainer, make_strategy

__all__ = ["Trainer", "build_optimizer", "make_strategy", "train_loop"]
