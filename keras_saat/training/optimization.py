"""The optimiser and its learning-rate schedule (warm-up, then constant, cosine or
exponential decay)."""

import keras
import numpy as np
import tensorflow as tf

from keras_saat.runtime.precision import resolve_precision


@keras.saving.register_keras_serializable(package="keras_saat")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then constant, cosine or per-epoch exponential decay.

    Args:
        learning_rate: float. Peak learning rate.
        kind: str. "constant", "cosine" or "exponential".
        total_steps: int. Steps in the run (cosine decays over them).
        steps_per_epoch: int. Steps per epoch (exponential decays once an epoch).
        warmup_steps: int. Linear warm-up steps. Defaults to 0.
        final_fraction: float. Cosine: the last rate as a fraction of the peak. Defaults to 0.1.
        decay_rate: float. Exponential: the factor per epoch. Defaults to 0.9.
    """

    def __init__(
        self,
        learning_rate,
        kind,
        total_steps,
        steps_per_epoch,
        warmup_steps=0,
        final_fraction=0.1,
        decay_rate=0.9,
    ):
        self.learning_rate = float(learning_rate)
        self.kind = kind
        self.total_steps = max(int(total_steps), 1)
        self.steps_per_epoch = max(int(steps_per_epoch), 1)
        self.warmup_steps = int(warmup_steps)
        self.final_fraction = float(final_fraction)
        self.decay_rate = float(decay_rate)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        rate = tf.constant(self.learning_rate, tf.float32)
        if self.kind == "cosine":
            progress = tf.minimum(step / self.total_steps, 1.0)
            cosine = 0.5 * (1.0 + tf.cos(np.pi * progress))
            rate = rate * (self.final_fraction + (1.0 - self.final_fraction) * cosine)
        elif self.kind == "exponential":
            rate = rate * tf.pow(self.decay_rate, tf.floor(step / self.steps_per_epoch))
        if self.warmup_steps:
            rate = rate * tf.minimum(1.0, (step + 1.0) / self.warmup_steps)
        return rate

    def get_config(self):
        names = ("learning_rate", "kind", "total_steps", "steps_per_epoch", "warmup_steps",
                 "final_fraction", "decay_rate")  # fmt: skip
        return {name: getattr(self, name) for name in names}


def build_optimizer(train_config, steps_per_epoch):
    """The configured optimiser (global-norm clipping, schedule, loss scaling when mixed)."""
    schedule = WarmupSchedule(
        train_config.learning_rate,
        train_config.lr_schedule,
        steps_per_epoch * train_config.epochs,
        steps_per_epoch,
        train_config.warmup_steps,
        train_config.lr_final_fraction,
        train_config.lr_decay_rate,
    )
    classes = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop}
    # Clipping happens in the trainer, on the gradients summed over replicas.
    optimizer = classes[train_config.optimizer](learning_rate=schedule)
    if resolve_precision(train_config.mixed_precision) == "float16":
        # float16's narrow range needs dynamic loss scaling; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
