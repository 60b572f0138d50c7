"""tf.data options shared by every pipeline of the package."""

import tensorflow as tf


def without_autotune(ds):
    """`ds` with tf.data's autotuner off (fixed buffers, parallelism the cores): with it on,
    the first step after an iterator's end can wait with the CPU idle."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)
