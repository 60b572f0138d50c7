"""Keras callbacks for `fit()`, shared with the command-line trainer (`train_loop`)."""

from keras_saat.callbacks.caption_metrics import CaptionMetrics
from keras_saat.callbacks.training_summaries import TrainingSummaries

__all__ = ["CaptionMetrics", "TrainingSummaries"]
