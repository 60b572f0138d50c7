"""Keras callbacks for `fit()`, shared with the command-line trainer (`train_loop`).

from keras_saat.callbacks import CaptionMetrics
model.fit(data, callbacks=[CaptionMetrics(dataset.split("val"))])
"""

from keras_saat.callbacks.caption_metrics import CaptionMetrics
from keras_saat.callbacks.training_summaries import TrainingSummaries

__all__ = ["CaptionMetrics", "TrainingSummaries"]
