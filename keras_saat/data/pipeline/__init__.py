"""An epoch's caption batches as tf.data, planned from the seed, from any feature source."""
