"""tf.data options shared by every pipeline of the package."""

import tensorflow as tf


def without_autotune(ds):
    """`ds` with tf.data's autotuner off; its AUTOTUNE parallelism and buffers then take
    fixed sizes (parallelism: the cores).

    With the autotuner on, the first step after an iterator's end sometimes waited
    seconds with the CPU idle on a 2-core machine (after an epoch, or a shard of the
    feature extraction); with it off the batches come as fast, without the waits
    (docs/performance.md, "The demo").
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)
