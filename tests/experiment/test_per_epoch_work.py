"""Per-epoch fixed work: the token table is built once a run, and validation captions a
capped, seeded subset of the val split."""

import json
import shutil

import keras
import pytest

from keras_saat import Captioner
from keras_saat.config import from_dict
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.experiment import epoch_batches, training_run
from keras_saat.experiment.scoring import caption_split
from keras_saat.text import Vocabulary
from tests.support.synthetic_data import write_synthetic_cache


class _Dataset:
    def __init__(self, records):
        self.records = records

    def split(self, name):
        return self.records


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("per_epoch") / "cache"
    records = write_synthetic_cache(folder, 24, {"locations": 64, "channels": 128}, shard_size=8)
    index = json.loads((folder / "index.json").read_text())
    val = json.loads(json.dumps(index["splits"]["train"]))  # the train shards, copied as val's
    for shard in val["shards"]:
        name = shard["file"].replace("train-", "val-", 1)
        shutil.copy(folder / shard["file"], folder / name)
        shard["file"] = name
    index["splits"]["val"] = val
    (folder / "index.json").write_text(json.dumps(index))
    return FeatureCache(folder), records


def test_the_token_table_is_built_once_for_all_epochs(cache, monkeypatch):
    source, records = cache
    vocabulary = Vocabulary.build([c.split() for r in records for c in r.captions])
    calls = []
    real = epoch_batches.token_table

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(epoch_batches, "token_table", counted)
    for batching in ("per_caption", "per_image"):
        calls.clear()
        config = from_dict({"data": {"batching": batching}, "train": {"batch_size": 10}})
        batches = epoch_batches.batching(config, records, source, 1)
        epoch_dataset = epoch_batches.epoch_datasets(
            config, _Dataset(records), vocabulary, source, batches
        )
        for epoch in range(3):
            assert sum(1 for _ in epoch_dataset(epoch)) == batches.steps
        assert len(calls) == 1, batching


def tiny_model(records):
    vocabulary = Vocabulary.build([c.split() for r in records for c in r.captions])
    keras.utils.set_random_seed(0)
    return Captioner(vocabulary.words, feature_dim=8, embedding_dim=4, lstm_units=8,
                     attention_units=4)  # fmt: skip


def test_validation_captions_only_the_seeded_subset(cache, tmp_path):
    source, records = cache
    config = from_dict({"data": {"val_images": 5}, "train": {"validate_every": 3, "seed": 7}})
    metrics = training_run.validation_metrics(config, _Dataset(records), source, tmp_path, False)
    assert len(metrics.images) == 5 and metrics.every == 3
    positions = training_run.validation_positions(len(records), 5, 7)
    assert positions == training_run.validation_positions(len(records), 5, 7)  # fixed
    assert len(set(positions)) == 5 and positions != list(range(5))
    assert metrics.references == [list(records[p].captions) for p in positions]
    model = tiny_model(records)
    captions = metrics.captions(model)
    assert sorted(captions) == list(range(5))  # decoded: the 5 chosen images, no more
    whole = caption_split(model, source, "val", records, config)
    assert len(whole) == 24
    assert [captions[i] for i in range(5)] == [whole[p] for p in positions]


def test_no_cap_validates_the_whole_split(cache, tmp_path):
    source, records = cache
    config = from_dict({"data": {"val_images": None}})
    metrics = training_run.validation_metrics(config, _Dataset(records), source, tmp_path, False)
    assert len(metrics.images) == 24 and metrics.every == 1
    config = from_dict({"data": {"val_images": 100}})
    assert training_run.validation_positions(24, 100, 0) is None


def test_captioning_for_scores_alone_keeps_no_attention(cache):
    source, records = cache
    model, config = tiny_model(records), from_dict({})
    words = caption_split(model, source, "val", records, config, details="words")
    full = caption_split(model, source, "val", records, config, details=True)
    assert all(attention is None for _, attention in words.values())
    assert all(attention.shape[1:] == (8, 8) for _, attention in full.values())
    assert {p: w for p, (w, _) in words.items()} == {p: w for p, (w, _) in full.items()}


@pytest.mark.parametrize("unroll,fused", [(True, None), (False, True)])
def test_the_training_line_says_how_the_step_is_computed(unroll, fused):
    """The plan printed before the first epoch names the form of teacher forcing and the
    fused scores when they are on, so a log says what its step times measured."""
    from types import SimpleNamespace

    from keras_saat.experiment.training_run import _plan_text

    config = SimpleNamespace(epochs=3, optimizer="adam", jit_compile=True)
    trainer = SimpleNamespace(jit_compile=True, unroll=unroll, fused_scores=fused)
    batches = SimpleNamespace(steps=4, captions=64, text="batch 16")
    line = _plan_text(config, trainer, batches)
    form = "unrolled" if unroll else "in one tf.while_loop"
    assert line.startswith("training: 3 epochs of 4 steps (64 captions, batch 16), adam, XLA, ")
    assert f"teacher forcing {form}" in line
    assert ("attention scores fused" in line) == bool(fused)
