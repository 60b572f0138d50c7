"""tf.data pipelines: an epoch's caption batches from any feature source.

Every caption of every image is one example per epoch (the paper's practice). Captions
are tokenised in the graph and batches are {"features", "image_index" or "images",
"tokens"} with tokens `<start> w_1 .. w_n <end> <pad>..`, as `Captioner` expects. An
epoch's batches are planned from its seed (`epoch_order`) and fetched from the source
(`planned_batches`), so a resumed epoch starts at its batch. `BatchPlan` says how.
"""

import collections

import tensorflow as tf

from keras_saat.data.pipeline.epoch_order import epoch_plan, from_step
from keras_saat.data.pipeline.planned_batches import plan_arrays, planned_batches
from keras_saat.errors import KerasSaatError
from keras_saat.runtime.pipeline_options import without_autotune
from keras_saat.text.tokenizer import tokenize_graph
from keras_saat.text.vocabulary import END_ID, PAD_ID, START_ID, UNK_ID


def word_table(vocabulary):
    """word -> id as a StaticHashTable (unknown words -> <unk>)."""
    words = tf.constant(vocabulary.words)
    ids = tf.range(len(vocabulary.words), dtype=tf.int32)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(words, ids), UNK_ID)


def encode_captions(captions, table, max_length):
    """(k,) caption strings -> (k, None) ragged ids `<start> .. <end>`, at most max_length words."""
    tokens = tokenize_graph(captions)[:, :max_length]  # (k, None)
    ids = tf.ragged.map_flat_values(table.lookup, tokens)
    column = tf.ones(tf.concat([tf.shape(captions, out_type=tf.int64)[:1], [1]], 0), tf.int32)
    return tf.concat([column * START_ID, ids, column * END_ID], axis=1)


def token_table(records, vocabulary, max_length):
    """(N, None, W) int32 ragged: each image's captions as padded token rows, by position,
    tokenised once so an epoch only gathers rows. W is the longest caption's tokens (cut to
    max_length words) plus `<start>` and `<end>`, so a generous max_length costs no padding.
    """
    table = word_table(vocabulary)
    captions = tf.constant([c for r in records for c in r.captions] or [""], tf.string)
    ids = encode_captions(captions, table, max_length)
    width = int(tf.reduce_max(ids.row_lengths()))
    rows = ids.to_tensor(default_value=PAD_ID, shape=[None, width])
    lengths = [len(r.captions) for r in records]
    return tf.RaggedTensor.from_row_lengths(rows[: sum(lengths)], lengths)


def caption_batches(source, split, records, tokens_of, plan):
    """An epoch's batches of every caption of a split, cut as `plan` says.

    Per caption, a batch holds `plan.batch_size` (image, caption) pairs; per image
    (`plan.per_image` k), {"features" (n, L, C) or "images" (n, S, S, 3), "tokens" (n, k,
    W)}: each image once beside k captions (one with more makes several groups).

    Args:
        source: FeatureSource. `FeatureCache` (batches hold "features"), `ResidentFeatures`
            ("image_index") or `ImageFiles` (decoded "images").
        split: str. The split to read.
        records: list of ImageRecord. The split's records (`dataset.split(split)`).
        tokens_of: the `token_table` of `records`, built once for a run's epochs.
        plan: BatchPlan. Batch size, per-image groups, shuffling, seed, bucketing,
            repeat and the first step.
    """
    width = int(tokens_of.flat_values.shape[-1])  # W
    row_splits = tokens_of.row_splits.numpy()
    lengths = None
    if plan.bucket_by_length:  # each caption's tokens up to its <end>
        lengths = tf.reduce_sum(tf.cast(tokens_of.flat_values != PAD_ID, tf.int32), -1).numpy()
    shard_positions = source.shard_positions(split, records)

    def plan_of(number):  # pass `number` of a repeated dataset; pass 0 has `plan.seed` itself
        seed = plan.seed if number == 0 or plan.seed is None else [plan.seed, number]
        return epoch_plan(
            shard_positions,
            row_splits,
            plan.batch_size,
            seed,
            plan.shuffle_buffer,
            lengths=lengths,
            per_image=plan.per_image,
            width=width,
            drop_remainder=plan.drop_remainder,
            shuffle=bool(plan.shuffle_buffer),
        )

    def arrays(number, step=0):
        return plan_arrays(from_step(plan_of(number), step), shard_positions, len(records))

    def batches_of(values):
        return planned_batches(source, split, records, values, tokens_of, plan)

    if not plan.repeat:
        batches = batches_of(arrays(0, plan.start_step))
        return without_autotune(batches.prefetch(tf.data.AUTOTUNE))
    first = arrays(0)
    keys = list(first)

    def one_pass(number):
        values = tf.numpy_function(
            lambda n: [arrays(int(n))[k] for k in keys],
            [number],
            [tf.as_dtype(first[k].dtype) for k in keys],
            stateful=False,
        )
        for value, key in zip(values, keys, strict=True):
            value.set_shape([None, *first[key].shape[1:]])
        return batches_of(dict(zip(keys, values, strict=True)))

    passes = tf.data.Dataset.range(2**62).flat_map(one_pass)
    return without_autotune(passes.prefetch(tf.data.AUTOTUNE))


def captions_per_image(records):
    """The most common number of captions an image has (the row count of per-image groups)."""
    counts = collections.Counter(len(r.captions) for r in records if r.captions)
    if not counts:
        raise KerasSaatError("no training image has a caption")
    return max(counts, key=lambda c: (counts[c], c))


def image_group_count(records, per_image, skip=()):
    """How many per-image groups an epoch holds: an image of c captions makes ceil(c / k)."""
    return sum(
        -(-len(r.captions) // per_image)
        for position, r in enumerate(records)
        if position not in skip and r.captions
    )
