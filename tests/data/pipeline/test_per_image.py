"""Per-image batches (`data.batching: per_image`): every caption once, the same objective."""

import dataclasses
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat import Captioner
from keras_saat.data import read_karpathy
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.input_pipeline import (
    caption_batches,
    captions_per_image,
    image_group_count,
    token_table,
)
from keras_saat.encoders import ImageEncoder
from keras_saat.text import PAD_ID, Vocabulary
from keras_saat.training.trainer import Trainer


@pytest.fixture(scope="module")
def world(shapes_dir, tmp_path_factory):
    """The train split with image 3 given 7 captions and image 5 given 2, and its cache."""
    target = tmp_path_factory.mktemp("per_image") / "shapes"
    shutil.copytree(shapes_dir, target)
    records = read_karpathy(target / "dataset_shapes.json").split("train")
    records[3] = dataclasses.replace(
        records[3], captions=records[3].captions + ["a red circle", "a blue square"]
    )
    records[5] = dataclasses.replace(records[5], captions=records[5].captions[:2])
    keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn")
    dataset = read_karpathy(target / "dataset_shapes.json")
    cache, _ = extract_features(
        encoder, dataset, target.parent / "cache", shard_size=16, log=lambda _: None
    )
    vocab = Vocabulary.build(c for r in records for c in r.references)
    return records, cache, vocab


@pytest.mark.slow
def test_every_caption_once_per_epoch_features_once_per_group(world):
    records, cache, vocab = world
    assert captions_per_image(records) == 5
    # 38 images of 5, one of 7 (two groups), one of 2: 41 groups.
    assert image_group_count(records, 5) == 41
    expected = [tuple(vocab.encode(c, 20)) for r in records for c in r.references]
    width = max(len(t) for t in expected)  # the longest caption's tokens
    seen, groups = [], 0
    plan = BatchPlan(4, per_image=5, shuffle_buffer=1000, seed=3, drop_remainder=False)
    for batch in caption_batches(cache, "train", records, token_table(records, vocab, 20), plan):
        tokens = batch["tokens"].numpy()
        assert tokens.shape[1:] == (5, width)
        # The features travel in the cache's dtype, once per group.
        assert batch["features"].dtype == tf.float16
        assert batch["features"].shape[0] == tokens.shape[0]
        groups += tokens.shape[0]
        seen += [tuple(t[t != PAD_ID]) for t in tokens.reshape(-1, width) if (t != PAD_ID).any()]
    assert groups == 41
    assert sorted(seen) == sorted(expected)


def test_the_image_order_is_shuffled_and_fixed_by_the_seed(world):
    records, cache, vocab = world

    def order(seed):
        plan = BatchPlan(8, per_image=5, shuffle_buffer=1000, seed=seed)
        ds = caption_batches(cache, "train", records, token_table(records, vocab, 20), plan)
        return [b["tokens"].numpy().tobytes() for b in ds]

    assert order(1) == order(1)
    assert order(1) != order(2)


def _model(**kwargs):
    keras.utils.set_random_seed(2)
    settings = dict(feature_dim=16, embedding_dim=8, lstm_units=12, attention_units=8, seed=1)
    return Captioner(["<pad>", "<unk>", "<start>", "<end>", "a", "b", "c"], dropout=0.0, **{
        **settings, **kwargs
    })  # fmt: skip


def _groups(n=4, k=3, seed=0):
    """Per-image batch (n, L, C) / (n, k, T) with one empty row, and its per-caption form."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 16, 128)).astype("float32")
    tokens = np.full((n, k, 7), PAD_ID, np.int32)
    for i in range(n):
        for j in range(k):
            if (i, j) == (1, 2):
                continue  # image 1 has k - 1 captions: its last row is empty
            length = rng.integers(1, 5)
            tokens[i, j, 0] = 2
            tokens[i, j, 1 : 1 + length] = rng.integers(4, 7, size=length)
            tokens[i, j, 1 + length] = 3
    rows = tokens.reshape(n * k, 7)
    keep = (rows != PAD_ID).any(axis=1)
    flat = {"features": np.repeat(features, k, axis=0)[keep], "tokens": rows[keep]}
    return {"features": features, "tokens": tokens}, flat


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_per_image_batches_give_the_per_caption_loss(attention):
    model = _model(attention=attention, hard_soft_probability=1.0)  # hard: expectations only
    grouped, flat = _groups()
    terms = model.loss_terms(model(grouped), grouped["tokens"])
    expected = model.loss_terms(model(flat), flat["tokens"])
    for key in ("loss", "nll", "penalty"):
        np.testing.assert_allclose(float(terms[key]), float(expected[key]), rtol=1e-5)


def _one_step(batch, clipnorm=0.0):
    """One SGD step of a fresh `_model` on `batch`: its scalars and the updated weights."""
    model = _model()
    trainer = Trainer(
        model, keras.optimizers.SGD(0.5), clipnorm=clipnorm, jit_compile=False, log=lambda _: None
    )
    values = trainer.train_step({k: tf.constant(v) for k, v in batch.items()})
    return values, [v.numpy() for v in model.trainable_variables]


def test_a_trainer_step_on_per_image_batches_equals_the_per_caption_step():
    grouped, flat = _groups()
    (grouped_values, grouped_weights), (flat_values, flat_weights) = (
        _one_step(grouped),
        _one_step(flat),
    )
    np.testing.assert_allclose(grouped_values["loss"], flat_values["loss"], rtol=1e-5)
    np.testing.assert_allclose(grouped_values["nll"], flat_values["nll"], rtol=1e-5)
    for a, b in zip(grouped_weights, flat_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("grouped", [False, True], ids=["per_caption", "per_image"])
def test_a_padded_batchs_step_equals_the_step_on_its_real_rows(grouped):
    """`data.partial_batches: pad`: the padding places (a caption of <pad> alone, beside
    the features of any image) change neither the loss nor the update."""
    batch, flat = _groups()
    real = batch if grouped else flat
    padded = {
        "features": np.concatenate([real["features"], np.repeat(real["features"][:1], 3, 0)]),
        "tokens": np.concatenate(
            [real["tokens"], np.full((3, *real["tokens"].shape[1:]), PAD_ID, np.int32)]
        ),
    }
    (real_values, real_weights), (padded_values, padded_weights) = (
        _one_step(real, clipnorm=1.0),
        _one_step(padded, clipnorm=1.0),
    )
    for key in ("loss", "nll", "attention_penalty", "grad_norm"):
        np.testing.assert_allclose(padded_values[key], real_values[key], rtol=1e-5)
    for a, b in zip(real_weights, padded_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
