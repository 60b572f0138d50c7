"""tf.data options shared by every pipeline of the package."""

import tensorflow as tf


def without_autotune(ds):
    """`ds` with tf.data's autotuner off; its AUTOTUNE parallelism and buffers then take
    fixed sizes (parallelism: the cores).

    With the autotuner on, the first step after an iterator's end (an epoch's, or a
    feature-extraction shard's) can wait with the CPU idle; with it off the batches come
    as fast, without the waits.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)
