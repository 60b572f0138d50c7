"""TrainingSummaries: training scalars to TensorBoard every few steps."""

import time
from pathlib import Path

import keras
import tensorflow as tf


class TrainingSummaries(keras.callbacks.Callback):
    """TensorBoard scalars (the batch logs and captions/s) every `every` steps; validation
    scores and attention maps are `CaptionMetrics`'s (its `log_dir`).

    Args:
        log_dir: path. The TensorBoard folder.
        every: int. Steps between training scalars. Defaults to 50.

    Example:
        ```python
        from keras_saat.callbacks import TrainingSummaries

        model.fit(data, epochs=5, callbacks=[TrainingSummaries("runs/logs", every=20)])
        ```
    """

    def __init__(self, log_dir, every=50):
        super().__init__()
        self.log_dir = Path(log_dir)
        self.every = max(int(every), 1)
        self.writer = None

    def on_train_begin(self, logs=None):
        self.writer = tf.summary.create_file_writer(str(self.log_dir))
        self.step = int(self.params.get("initial_step", 0))
        self.window_start, self.window_steps = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self.window_steps += 1
        if self.step % self.every:
            return
        values = dict(logs or {})
        if "batch_size" in self.params:
            elapsed = max(time.perf_counter() - self.window_start, 1e-9)
            values["captions_per_s"] = self.window_steps * self.params["batch_size"] / elapsed
        self.window_start, self.window_steps = time.perf_counter(), 0
        with self.writer.as_default(step=self.step):
            for key, value in values.items():
                tf.summary.scalar(f"train/{key}", float(value))
        self.writer.flush()

    def on_train_end(self, logs=None):
        if self.writer is not None:
            self.writer.close()
