"""tf.data pipelines: caption batches from the feature cache or from images.

Every caption of every image is one example per epoch (the paper's practice).
Captions are tokenised in the graph (tensorflow-text) and looked up with a
static hash table; batches are {"features" or "images", "tokens"} with tokens
`<start> w_1 .. w_n <end> <pad>..`, as `Captioner` expects.

An epoch's batches are planned in NumPy from its seed (`epoch_order`) and fetched by
`planned_batches`, so a resumed epoch (`start_step`) starts at its batch without
building or reading the ones before it.
"""

import collections

import numpy as np
import tensorflow as tf

from keras_saat.data.pipeline.epoch_order import epoch_plan, from_step, shard_positions_from_index
from keras_saat.data.images import decode_image
from keras_saat.runtime.pipeline_options import without_autotune
from keras_saat.data.pipeline.planned_batches import plan_arrays, planned_batches
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.errors import KerasSaatError
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
    k = tf.shape(captions, out_type=tf.int64)[:1]
    start = tf.fill(tf.concat([k, [1]], 0), START_ID)
    end = tf.fill(tf.concat([k, [1]], 0), END_ID)
    return tf.concat([start, ids, end], axis=1)


def token_table(records, vocabulary, max_length):
    """(N, None, W) int32 ragged: each image's captions as padded token rows, by position.
    Tokenised once, in one vectorised call, so an epoch only gathers rows.

    W, the static token width of every batch, is the longest caption's tokens (cut to
    max_length words) plus `<start>` and `<end>`: teacher forcing unrolls W - 1 steps, so
    a max_length above every caption's length costs nothing (the Shapes world's captions
    have at most 16 words; padding them to 20 would make a fifth of the steps pads).
    """
    table = word_table(vocabulary)
    captions = tf.constant([c for r in records for c in r.captions] or [""], tf.string)
    ids = encode_captions(captions, table, max_length)
    width = int(tf.reduce_max(ids.row_lengths()))
    rows = ids.to_tensor(default_value=PAD_ID, shape=[None, width])
    lengths = [len(r.captions) for r in records]
    return tf.RaggedTensor.from_row_lengths(rows[: sum(lengths)], lengths)


def token_width(tokens_of):
    """W of a `token_table`: the token width of its batches."""
    return int(tokens_of.flat_values.shape[-1])


def _shard_positions(source, split, records):
    """Each shard's image positions in its order: the resident table's (read from the
    shards), the cache index's, or one "shard" of every record for image files."""
    if isinstance(source, ResidentFeatures):
        if source.split != split:
            raise KerasSaatError(
                f"the resident features hold the '{source.split}' split, not '{split}'"
            )
        return source.shard_positions
    if isinstance(source, str):
        return [np.arange(len(records), dtype=np.int32)]
    return shard_positions_from_index(source, split)


def _pass_seed(seed, number):
    """The seed of pass `number` of a repeated dataset (pass 0: `seed` itself)."""
    if number == 0 or seed is None:
        return seed
    return [seed, number]


def _planned(source, split, records, tokens_of, plan_of, start_step, repeat, **options):
    """The batches of `plan_of(seed of the pass)` from `start_step` on; with `repeat`,
    pass after pass, each its own order."""
    shard_positions = _shard_positions(source, split, records)
    count = len(records)

    def arrays(number, step=0):
        return plan_arrays(from_step(plan_of(number), step), shard_positions, count)

    build = dict(records=records, **options)
    if not repeat:
        batches = planned_batches(source, split, arrays(0, start_step), tokens_of, **build)
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
        return planned_batches(
            source, split, dict(zip(keys, values, strict=True)), tokens_of, **build
        )

    passes = tf.data.Dataset.range(2**62).flat_map(one_pass)
    return without_autotune(passes.prefetch(tf.data.AUTOTUNE))


def caption_dataset(
    cache_or_images,
    split,
    records,
    vocabulary,
    max_length,
    batch_size,
    shuffle_buffer=5000,
    seed=None,
    bucket_by_length=False,
    drop_remainder=True,
    image_size=None,
    resize="crop",
    repeat=False,
    tokens_of=None,
    start_step=0,
):
    """Batches of every (image, caption) pair of a split.

    Features travel in the cache's dtype (float16 by default: half of float32's bytes to
    the device) and `Captioner` casts them there; decoded images arrive as float32.

    Args:
        cache_or_images: FeatureCache (batches hold "features"), ResidentFeatures (batches
            hold "image_index", rows of its table: the same batches otherwise) or the
            string "images" (batches hold decoded "images": the backbone trains or no
            cache is wanted).
        split: str. The split to read.
        records: list of ImageRecord. The split's records (`dataset.split(split)`).
        vocabulary: Vocabulary.
        max_length: int. Captions are cut to this many words.
        batch_size: int.
        shuffle_buffer: int. Captions shuffled together: the shards come in a seeded
            order, in windows of at least this many captions, each window's captions in a
            seeded permutation (0 = the cache's order). Defaults to 5000.
        seed: int or None. The epoch's seed: its order is a function of it alone
            (`keras_saat.data.pipeline.epoch_order`). Defaults to None.
        bucket_by_length: bool. Batch captions of similar length together (fewer pads,
            several static shapes). Defaults to False (one static shape, best for XLA).
        drop_remainder: bool. Drop each window's (and length bucket's) last partial batch
            (static shapes), or keep it. Defaults to True.
        image_size: int. Needed with "images". Defaults to None.
        resize: str. Resize mode with "images". Defaults to "crop".
        repeat: bool. Repeat forever, reshuffling each pass (pair with `steps_per_epoch`).
            Defaults to False.
        tokens_of: the `token_table` of `records`, built once for a run's epochs, or None
            to build it here. Defaults to None.
        start_step: int. The first batch (a resumed epoch's step): the batches before it
            are never built, nor the shards before its window read. Defaults to 0.
    """
    if tokens_of is None:
        tokens_of = token_table(records, vocabulary, max_length)
    width = token_width(tokens_of)
    row_splits = tokens_of.row_splits.numpy()
    lengths = None
    if bucket_by_length:  # each caption's tokens up to its <end>
        lengths = tf.reduce_sum(tf.cast(tokens_of.flat_values != PAD_ID, tf.int32), -1).numpy()

    def plan_of(number):
        return epoch_plan(
            _shard_positions(cache_or_images, split, records),
            row_splits,
            batch_size,
            _pass_seed(seed, number),
            shuffle_buffer,
            lengths=lengths,
            width=width,
            drop_remainder=drop_remainder,
            shuffle=bool(shuffle_buffer),
        )

    return _planned(
        cache_or_images, split, records, tokens_of, plan_of, start_step, repeat,
        image_size=image_size, resize=resize, bucketed=bucket_by_length,
        drop_remainder=drop_remainder, batch_size=batch_size, float_images=True,
    )  # fmt: skip


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


def image_group_dataset(
    cache_or_images,
    split,
    records,
    vocabulary,
    max_length,
    images_per_batch,
    per_image=None,
    shuffle_buffer=1000,
    seed=None,
    drop_remainder=True,
    image_size=None,
    resize="crop",
    repeat=False,
    tokens_of=None,
    start_step=0,
):
    """Per-image batches: {"features" (n, L, C) or "images" (n, S, S, 3), "tokens" (n, k, W)}.

    Each image's features (in the cache's dtype) or pixels (uint8) are in the batch once,
    beside its k captions; `Captioner` repeats them for the captions on the device. An image
    with more than k captions makes several groups (the second one's empty rows are all
    <pad> and weigh nothing in the loss), so every caption is trained on once per epoch.
    Images are shuffled; captions stay with their image (a batch's loss is a sum over its
    captions, so their order within it does not matter).

    Args:
        cache_or_images: FeatureCache, ResidentFeatures (batches hold "image_index" (n,)
            instead of "features") or "images" (batches of decoded uint8 pixels).
        split: str. The split to read.
        records: list of ImageRecord. The split's records.
        vocabulary: Vocabulary.
        max_length: int. Captions are cut to this many words.
        images_per_batch: int. Groups (images) per batch.
        per_image: int or None. k, caption rows per group. Defaults to the most common
            caption count of `records`.
        shuffle_buffer: int. Groups shuffled together, in windows of whole shards as
            `caption_dataset` does (0 = the cache's order). Defaults to 1000.
        seed: int or None. The epoch's seed: its order is a function of it alone.
            Defaults to None.
        drop_remainder: bool. Drop each window's (and length bucket's) last partial batch
            (static shapes), or keep it. Defaults to True.
        image_size: int. Needed with "images". Defaults to None.
        resize: str. Resize mode with "images". Defaults to "crop".
        repeat: bool. Repeat forever, reshuffling each pass. Defaults to False.
        tokens_of: the `token_table` of `records`, built once for a run's epochs, or None
            to build it here. Defaults to None.
        start_step: int. The first batch (a resumed epoch's step). Defaults to 0.
    """
    per_image = int(per_image or captions_per_image(records))
    if tokens_of is None:
        tokens_of = token_table(records, vocabulary, max_length)
    row_splits = tokens_of.row_splits.numpy()

    def plan_of(number):
        return epoch_plan(
            _shard_positions(cache_or_images, split, records),
            row_splits,
            images_per_batch,
            _pass_seed(seed, number),
            shuffle_buffer,
            per_image=per_image,
            width=token_width(tokens_of),
            drop_remainder=drop_remainder,
            shuffle=bool(shuffle_buffer),
        )

    return _planned(
        cache_or_images, split, records, tokens_of, plan_of, start_step, repeat,
        image_size=image_size, resize=resize, drop_remainder=drop_remainder,
        batch_size=images_per_batch,
    )  # fmt: skip


def decoded_images(
    records, image_size, resize="crop", dtype=tf.float32, shuffle=False, seed=None, positions=None
):
    """{"position", "images"} per readable image file of `records` (unreadable ones drop out);
    only those at `positions` (a list of int) when given."""
    positions = np.arange(len(records)) if positions is None else np.asarray(positions)
    paths = [str(records[p].path) for p in positions]
    ds = tf.data.Dataset.from_tensor_slices((positions.astype(np.int32), paths))
    if shuffle:
        ds = ds.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)

    def load(position, path):
        pixels = decode_image(tf.io.read_file(path), image_size, resize)
        return {"position": position, "images": tf.cast(pixels, dtype)}

    return ds.map(load, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()


def evaluation_batches(
    source, split, records, batch_size=64, image_size=None, resize="crop", positions=None
):
    """Per-image batches for decoding: {"position", "features"} from a FeatureCache, or
    {"position", "images"} when `source` is "images". References stay with the records.
    With `positions` (a list of int), only those images of the split."""
    if isinstance(source, str):
        return image_batches(records, image_size, resize, batch_size, positions)
    ds = source.dataset(split)
    if positions is not None:
        keep = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(np.asarray(positions, np.int32)), tf.ones(len(positions), tf.int32)
            ),
            0,
        )
        ds = ds.filter(lambda example: keep.lookup(example["position"]) > 0)
    return without_autotune(ds.batch(batch_size).prefetch(tf.data.AUTOTUNE))


def image_batches(records, image_size, resize="crop", batch_size=32, positions=None):
    """Per-image batches {"position", "images"} decoded from files (unreadable images drop
    out); only the images at `positions` when given."""
    batches = decoded_images(records, image_size, resize, positions=positions).batch(batch_size)
    return without_autotune(batches.prefetch(tf.data.AUTOTUNE))
