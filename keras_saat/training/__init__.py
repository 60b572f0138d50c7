"""Training: the fit()-based pipeline."""

from keras_saat.training.pipeline import train

__all__ = ["train"]
