"""tf.data pipelines: caption batches from the feature cache or from images.

Every caption of every image is one example per epoch (the paper's practice).
Captions are tokenised in the graph (tensorflow-text) and looked up with a
static hash table; batches are {"features" or "images", "tokens"} with tokens
`<start> w_1 .. w_n <end> <pad>..`, as `Captioner` expects.
"""

import collections

import numpy as np
import tensorflow as tf

from keras_saat.data.images import decode_image
from keras_saat.data.pipeline_options import without_autotune
from keras_saat.data.resident_features import ResidentFeatures
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


def _batch(ds, batch_size, width, bucket_by_length, drop_remainder):
    """Pads tokens to `width` (one static shape) or to their length bucket's boundary."""
    spec = ds.element_spec
    padding = {k: tf.constant(PAD_ID if k == "tokens" else 0, v.dtype) for k, v in spec.items()}
    if not bucket_by_length:
        shapes = {k: ([width] if k == "tokens" else v.shape) for k, v in spec.items()}
        return ds.padded_batch(batch_size, shapes, padding, drop_remainder=drop_remainder)
    # Bucket i holds token lengths below boundary i and is padded to boundary i - 1.
    limits = sorted({b for b in (8, 11, 14, 17, 20, 25, 30) if b < width} | {width})
    boundaries = [b + 1 for b in limits]
    shapes = {k: ([None] if k == "tokens" else v.shape) for k, v in spec.items()}
    return ds.bucket_by_sequence_length(
        lambda ex: tf.shape(ex["tokens"])[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        padded_shapes=shapes,
        padding_values=padding,
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )


def _image_source(cache_or_images, split, records, image_size, resize, shuffle, seed):
    """("features", the cache's per-image rows in its dtype), ("image_index", rows of
    device-resident features, in the cache's order) or ("images", decoded uint8 pixels: a
    quarter of float32's memory in a shuffle buffer)."""
    if isinstance(cache_or_images, ResidentFeatures):
        if cache_or_images.split != split:
            raise KerasSaatError(
                f"the resident features hold the '{cache_or_images.split}' split, not '{split}'"
            )
        return "image_index", cache_or_images.dataset(shuffle_files=shuffle, seed=seed)
    if isinstance(cache_or_images, str):
        return "images", decoded_images(
            records, image_size, resize, tf.uint8, shuffle=shuffle, seed=seed
        )
    return "features", cache_or_images.dataset(
        split, shuffle_files=shuffle, seed=seed, keep_dtype=True
    )


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
        shuffle_buffer: int. Examples in the shuffle buffer (0 = no shuffling). Defaults to 5000.
        seed: int or None. Shuffle seed. Defaults to None.
        bucket_by_length: bool. Batch captions of similar length together (fewer pads,
            several static shapes). Defaults to False (one static shape, best for XLA).
        drop_remainder: bool. Drop the last partial batch (static shapes). Defaults to True.
        image_size: int. Needed with "images". Defaults to None.
        resize: str. Resize mode with "images". Defaults to "crop".
        repeat: bool. Repeat forever, reshuffling each pass (pair with `steps_per_epoch`).
            Defaults to False.
        tokens_of: the `token_table` of `records`, built once for a run's epochs, or None
            to build it here. Defaults to None.
    """
    if tokens_of is None:
        tokens_of = token_table(records, vocabulary, max_length)
    key, images = _image_source(
        cache_or_images, split, records, image_size, resize, bool(shuffle_buffer), seed
    )

    def expand(example):
        # One image -> its k (image, caption) rows, unbatched below.
        tokens = tokens_of[example["position"]]  # (k, W)
        repeated = tf.repeat(example[key][None], tf.shape(tokens)[0], axis=0)
        return {key: repeated, "tokens": tokens}

    def unpad(example):  # each caption back to its own length, for the buckets
        length = tf.reduce_sum(tf.cast(example["tokens"] != PAD_ID, tf.int32))
        return {key: example[key], "tokens": example["tokens"][:length]}

    def to_float(batch):
        return {key: tf.cast(batch[key], tf.float32), "tokens": batch["tokens"]}

    if repeat:
        images = images.repeat()
    # map + unbatch: flat_map's order, the images expanded in parallel at a fraction of
    # flat_map's per-image cost.
    ds = images.map(expand, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    if bucket_by_length:
        ds = ds.map(unpad)
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = _batch(ds, batch_size, token_width(tokens_of), bucket_by_length, drop_remainder)
    if key == "images":
        ds = ds.map(to_float, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    return without_autotune(ds)


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
        shuffle_buffer: int. Images in the shuffle buffer (0 = no shuffling). Defaults to 1000.
        seed: int or None. Shuffle seed. Defaults to None.
        drop_remainder: bool. Drop the last partial batch (static shapes). Defaults to True.
        image_size: int. Needed with "images". Defaults to None.
        resize: str. Resize mode with "images". Defaults to "crop".
        repeat: bool. Repeat forever, reshuffling each pass. Defaults to False.
        tokens_of: the `token_table` of `records`, built once for a run's epochs, or None
            to build it here. Defaults to None.
    """
    per_image = int(per_image or captions_per_image(records))
    if tokens_of is None:
        tokens_of = token_table(records, vocabulary, max_length)
    key, images = _image_source(
        cache_or_images, split, records, image_size, resize, bool(shuffle_buffer), seed
    )
    width = token_width(tokens_of)

    def groups(example):
        tokens = tokens_of[example["position"]]  # (c, width)
        count = tf.shape(tokens)[0]
        group_count = (count + per_image - 1) // per_image
        tokens = tf.pad(
            tokens, [[0, group_count * per_image - count], [0, 0]], constant_values=PAD_ID
        )
        tokens = tf.reshape(tokens, [group_count, per_image, width])
        repeated = tf.repeat(example[key][None], group_count, axis=0)
        return {key: repeated, "tokens": tokens}

    if repeat:
        images = images.repeat()
    ds = images.map(groups, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(images_per_batch, drop_remainder=drop_remainder)
    return without_autotune(ds.prefetch(tf.data.AUTOTUNE))


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
