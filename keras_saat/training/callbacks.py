"""Keras callbacks for the command-line trainer (`train_loop`), usable under `fit()` too."""

import time
from pathlib import Path

import keras
import tensorflow as tf


class TrainingSummaries(keras.callbacks.Callback):
    """TensorBoard scalars every `every` steps; validation scores and attention maps each epoch.

    Args:
        log_dir: path. The TensorBoard folder.
        every: int. Steps between training scalars. Defaults to 50.
        images_fn: callable() -> [(caption, strip (H, W, 3) in [0, 1])] or None. Attention
            strips written after each epoch. Defaults to None.

    The step count starts at `params["initial_step"]` (a resumed run's steps so far) and the
    throughput uses `params["batch_size"]`, when the loop passes them.
    """

    def __init__(self, log_dir, every=50, images_fn=None):
        super().__init__()
        self.log_dir = Path(log_dir)
        self.every = max(int(every), 1)
        self.images_fn = images_fn
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
        self._scalars("train", values)

    def on_epoch_end(self, epoch, logs=None):
        scores = {k[4:]: v for k, v in (logs or {}).items() if k.startswith("val_")}
        self._scalars("val", scores)
        if self.images_fn is not None:
            with self.writer.as_default(step=self.step):
                for i, (caption, strip) in enumerate(self.images_fn()):
                    tf.summary.image(f"attention/{i}", strip[None], description=caption)
            self.writer.flush()

    def on_train_end(self, logs=None):
        if self.writer is not None:
            self.writer.close()

    def _scalars(self, prefix, values):
        with self.writer.as_default(step=self.step):
            for key, value in values.items():
                tf.summary.scalar(f"{prefix}/{key}", float(value))
        self.writer.flush()
