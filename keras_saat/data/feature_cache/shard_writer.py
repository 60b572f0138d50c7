"""A feature cache shard written on a thread, so serialising and writing overlap the backbone."""

import queue
import threading

import tensorflow as tf

from keras_saat.data.feature_cache.cache_format import feature_example


class ShardWriter(threading.Thread):
    """Serialises and writes examples on a thread, so writing overlaps the backbone."""

    def __init__(self, path, dtype, compression):
        super().__init__(daemon=True)
        self.path, self.queue, self.error, self.written = path, queue.Queue(maxsize=8), None, []
        self.format = (dtype, compression)

    def run(self):
        try:
            with tf.io.TFRecordWriter(str(self.path)) as writer:
                while (item := self.queue.get()) is not None:
                    positions, features = item
                    for position, row in zip(positions, features, strict=True):
                        writer.write(feature_example(position, row, *self.format))
                        self.written.append(int(position))
        except Exception as err:  # surfaced by the main thread
            self.error = err
            while self.queue.get() is not None:
                pass
