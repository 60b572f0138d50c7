"""Device-resident features: the tf.data path's batches as image indices, gathered on the device."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat import Captioner
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.resident_features import (
    ResidentFeatures,
    resident_bytes,
    resident_dtype,
)
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.input_pipeline import caption_batches, captions_per_image, token_table
from keras_saat.errors import KerasSaatError
from keras_saat.text import Vocabulary
from keras_saat.training.trainer import Trainer
from tests.support.synthetic_data import write_synthetic_cache

SIZE = {"locations": 64, "channels": 128}  # the default backbone's grid (shapes_cnn)
SKIPPED = (4, 11)  # unreadable images: no row in any batch


def captions(source, records, vocabulary, batch_size, shuffle_buffer, seed, split="train"):
    """One epoch of per-caption batches (captions cut to 20 words)."""
    plan = BatchPlan(batch_size, shuffle_buffer=shuffle_buffer, seed=seed)
    return caption_batches(source, split, records, token_table(records, vocabulary, 20), plan)


def groups(source, records, vocabulary, images_per_batch, seed):
    """One epoch of per-image batches, as many rows a group as most images have captions."""
    plan = BatchPlan(
        images_per_batch, per_image=captions_per_image(records), shuffle_buffer=1000, seed=seed
    )
    return caption_batches(source, "train", records, token_table(records, vocabulary, 20), plan)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """30 images in five shards of 7 (two of them with an unreadable image) and their cache."""
    folder = tmp_path_factory.mktemp("resident") / "cache"
    records = write_synthetic_cache(folder, 30, SIZE, shard_size=7, skip=SKIPPED)
    cache = FeatureCache(folder)
    vocabulary = Vocabulary.build(c for r in records for c in r.references)
    return records, cache, vocabulary


def test_the_table_holds_each_image_at_its_position(world):
    _, cache, _ = world
    resident = ResidentFeatures(cache)
    positions, features = cache.load("train")
    table = resident.table.numpy()
    assert table.shape == (30, 64, 128) and table.dtype == np.float16
    np.testing.assert_array_equal(table[positions], features.astype(np.float16))
    assert not table[list(SKIPPED)].any()
    assert resident.nbytes == resident_bytes(cache, "train", "float16") == 30 * 64 * 128 * 2
    assert [len(p) for p in resident.shard_positions("train")] == [6, 6, 7, 7, 2]
    for held, name in zip(resident.shard_positions("train"), cache.files("train"), strict=True):
        read = np.concatenate([p.numpy() for p, _, _ in cache.read_shard(name, chunk=4)])
        np.testing.assert_array_equal(held, read)  # each shard's own order, gaps included


@pytest.mark.parametrize("seed", [0, 5])
def test_caption_batches_are_the_streamed_ones_as_indices(world, seed):
    records, cache, vocabulary = world
    resident = ResidentFeatures(cache)
    streamed = list(captions(cache, records, vocabulary, 8, 40, seed))
    indexed = list(captions(resident, records, vocabulary, 8, 40, seed))
    readable = sum(len(r.captions) for p, r in enumerate(records) if p not in SKIPPED)
    # Windows of two shards (at least 40 captions), each dropping its last partial batch.
    assert len(streamed) == len(indexed) >= (readable - 3 * 7) // 8
    for a, b in zip(streamed, indexed, strict=True):
        assert sorted(b) == ["image_index", "tokens"] and b["image_index"].dtype == tf.int32
        np.testing.assert_array_equal(a["tokens"], b["tokens"])
        rows = tf.cast(resident.gather(b["image_index"]), tf.float32)
        np.testing.assert_array_equal(a["features"], rows)


def test_per_image_batches_are_the_streamed_ones_as_indices(world):
    records, cache, vocabulary = world
    resident = ResidentFeatures(cache)
    streamed = list(groups(cache, records, vocabulary, 3, seed=2))
    indexed = list(groups(resident, records, vocabulary, 3, seed=2))
    assert len(streamed) == len(indexed) > 5
    for a, b in zip(streamed, indexed, strict=True):
        np.testing.assert_array_equal(a["tokens"], b["tokens"])
        np.testing.assert_array_equal(a["features"], resident.gather(b["image_index"]))
    # Another seed gives another order, as the streamed path does.
    other = next(iter(groups(resident, records, vocabulary, 3, seed=3)))
    assert not np.array_equal(other["image_index"], indexed[0]["image_index"])


@pytest.mark.parametrize(
    "cache, compute, held",
    [
        ("float16", "float32", "float16"),
        ("float32", "float32", "float32"),
        ("float16", "bfloat16", "bfloat16"),
        ("float32", "bfloat16", "bfloat16"),
        ("float32", "float16", "float16"),
    ],
)
def test_rows_are_held_in_the_dtype_the_model_computes_them_in(cache, compute, held):
    assert resident_dtype(cache, compute) == tf.as_dtype(held)


def test_bfloat16_rows_equal_the_models_own_cast(world):
    _, cache, _ = world
    resident = ResidentFeatures(cache, dtype="bfloat16")
    positions, features = cache.load("train")  # float32, as the streamed batches carry them
    expected = tf.cast(tf.constant(features), tf.bfloat16)  # what the model's cast makes
    np.testing.assert_array_equal(
        tf.cast(tf.gather(resident.table, positions), tf.float32),
        tf.cast(expected, tf.float32),
    )


def _trainer(resident=None):
    vocabulary = Vocabulary.build([["a", "red", "circle"]])
    keras.utils.set_random_seed(1)
    model = Captioner(
        vocabulary.words, feature_dim=8, embedding_dim=8, lstm_units=12, attention_units=8, seed=1
    )
    return Trainer(
        model, keras.optimizers.SGD(0.5), jit_compile=False, log=lambda _: None, resident=resident
    )


@pytest.mark.parametrize("jit", [False, True])
def test_a_step_on_indices_equals_the_step_on_their_features(world, jit):
    _, cache, _ = world
    resident = ResidentFeatures(cache)
    index = tf.constant([0, 3, 3, 29], tf.int32)
    tokens = tf.constant([[1, 4, 5, 2], [1, 6, 2, 0], [1, 4, 2, 0], [1, 5, 6, 2]], tf.int32)
    features = tf.cast(resident.gather(index), tf.float32)
    results = []
    for trainer, batch in (
        (_trainer(), {"features": features, "tokens": tokens}),
        (_trainer(resident), {"image_index": index, "tokens": tokens}),
    ):
        trainer.jit_compile = jit
        values = trainer.train_step(batch)
        results.append((float(values["loss"]), [v.numpy() for v in trainer.model.weights]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_indices_without_the_resident_features_are_refused():
    trainer = _trainer()
    batch = {"image_index": tf.constant([0]), "tokens": tf.constant([[1, 4, 2]])}
    with pytest.raises(KerasSaatError, match="resident"):
        trainer.train_step(batch)


def test_fit_on_indices_says_what_to_use():
    model = _trainer().model
    model.compile(optimizer="sgd")
    batch = {"image_index": tf.constant([0]), "tokens": tf.constant([[1, 4, 2]])}
    with pytest.raises(KerasSaatError, match=r"Trainer\(resident=...\)"):
        model.fit(tf.data.Dataset.from_tensors(batch), verbose=0)


def test_another_split_is_refused(world):
    records, cache, vocabulary = world
    with pytest.raises(KerasSaatError, match="'train' split, not 'val'"):
        captions(ResidentFeatures(cache), records, vocabulary, 8, 5000, None, split="val")


@pytest.fixture(scope="module")
def int8_world(tmp_path_factory):
    """The world's 30 images again, in an int8+zlib cache."""
    folder = tmp_path_factory.mktemp("resident_int8") / "cache"
    records = write_synthetic_cache(
        folder, 30, SIZE, shard_size=7, skip=SKIPPED, dtype="int8", compression="zlib"
    )
    vocabulary = Vocabulary.build(c for r in records for c in r.references)
    return records, FeatureCache(folder), vocabulary


@pytest.mark.parametrize("compute", ["float32", "bfloat16"])
def test_an_int8_cache_stays_int8_on_the_device(compute):
    assert resident_dtype("int8", compute) == tf.int8


def test_int8_rows_are_held_with_their_scales_and_dequantised_by_the_gather(int8_world, world):
    records, cache, vocabulary = int8_world
    resident = ResidentFeatures(cache)
    assert resident.table.dtype == tf.int8 and resident.scales.shape == (30, 128)
    assert resident.nbytes == 30 * (64 * 128 + 2 * 128)  # half of float16's, and the scales
    positions, features = cache.load("train")  # dequantised in float32
    np.testing.assert_array_equal(resident.gather(positions), features.astype(np.float16))
    streamed = list(captions(cache, records, vocabulary, 8, 40, 3))
    indexed = list(captions(resident, records, vocabulary, 8, 40, 3))
    assert len(streamed) == len(indexed) > 5
    for a, b in zip(streamed, indexed, strict=True):
        assert a["features"].dtype == tf.float16  # dequantised in the input pipeline
        np.testing.assert_array_equal(a["features"], resident.gather(b["image_index"]))
    with pytest.raises(KerasSaatError, match="int8 resident features need an int8 cache"):
        ResidentFeatures(world[1], dtype="int8")  # a float16 cache


@pytest.mark.slow
def test_a_step_on_int8_indices_equals_the_step_on_their_features(int8_world):
    _, cache, _ = int8_world
    resident = ResidentFeatures(cache)
    index = tf.constant([0, 3, 3, 29], tf.int32)
    tokens = tf.constant([[1, 4, 5, 2], [1, 6, 2, 0], [1, 4, 2, 0], [1, 5, 6, 2]], tf.int32)
    losses = []
    for trainer, batch in (
        (_trainer(), {"features": resident.gather(index), "tokens": tokens}),
        (_trainer(resident), {"image_index": index, "tokens": tokens}),
    ):
        losses.append([float(trainer.train_step(batch)["loss"]) for _ in range(2)])
    assert np.isfinite(losses).all() and losses[0][1] < losses[0][0]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
