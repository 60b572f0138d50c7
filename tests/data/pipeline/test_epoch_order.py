"""An epoch's order as a plan: a resumed epoch starts at its batch, reading nothing before it."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.config import from_dict
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.data.feature_cache.shard_checks import naming_damaged_shards
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.epoch_order import epoch_plan, from_step
from keras_saat.data.pipeline.input_pipeline import caption_batches, token_table
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.epoch_batches import batching
from keras_saat.text import PAD_ID, Vocabulary
from tests.support.synthetic_data import write_synthetic_cache

SIZE = {"locations": 16, "channels": 8}
SKIPPED = (4, 11)


class RecordingCache(FeatureCache):
    """A FeatureCache that records the position of every record it parses."""

    def __init__(self, directory):
        super().__init__(directory)
        self.parsed = []

    def parse_fn(self, keep_dtype=False, count=None):
        parse = super().parse_fn(keep_dtype, count)

        def record(position):
            self.parsed.append(int(position))
            return position

        def recorded(serialized):
            example = parse(serialized)
            position = tf.numpy_function(record, [example["position"]], tf.int32, stateful=True)
            position.set_shape([])
            return {**example, "position": position}

        return recorded


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """40 images in eight shards of 5 (two with an unreadable image) and their cache."""
    folder = tmp_path_factory.mktemp("order") / "cache"
    records = write_synthetic_cache(folder, 40, SIZE, shard_size=5, skip=SKIPPED)
    vocabulary = Vocabulary.build(c for r in records for c in r.references)
    return records, folder, vocabulary


def batches_of(mode, source, records, vocabulary, start_step=0, pad=False):
    """One epoch (seed 3, windows of 30 captions or 6 groups) of `mode`'s batches, the
    partial batches dropped or padded."""
    tokens = token_table(records, vocabulary, 20)
    remainder = {"drop_remainder": not pad, "pad_remainder": pad}
    if mode == "per_image":
        plan = BatchPlan(
            2, per_image=5, shuffle_buffer=6, seed=3, start_step=start_step, **remainder
        )
    else:
        plan = BatchPlan(
            4, shuffle_buffer=30, seed=3, bucket_by_length=mode == "bucketed",
            start_step=start_step, **remainder,
        )  # fmt: skip
    return caption_batches(source, "train", records, tokens, plan)


def as_numpy(batches):
    return [{k: v.numpy() for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("mode", ["caption", "bucketed", "per_image", "resident", "padded"])
def test_a_resumed_epoch_starts_at_the_uninterrupted_runs_batch(world, mode):
    records, folder, vocabulary = world
    cache = FeatureCache(folder)
    source = ResidentFeatures(cache) if mode == "resident" else cache
    pad = mode == "padded"
    mode = "caption" if mode in ("resident", "padded") else mode
    whole = as_numpy(batches_of(mode, source, records, vocabulary, pad=pad))
    assert len(whole) > 8
    for step in (1, 5, len(whole) - 1):
        resumed = as_numpy(batches_of(mode, source, records, vocabulary, start_step=step, pad=pad))
        assert len(resumed) == len(whole) - step
        for a, b in zip(whole[step:], resumed, strict=True):
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{mode} {step} {key}")


@pytest.mark.parametrize("mode", ["caption", "bucketed", "per_image", "resident"])
def test_padded_epochs_hold_every_caption_once_in_full_batches(world, mode):
    records, folder, vocabulary = world
    cache = FeatureCache(folder)
    source = ResidentFeatures(cache) if mode == "resident" else cache
    mode = "caption" if mode == "resident" else mode
    readable = [p for p in range(len(records)) if p not in SKIPPED]
    words = [np.asarray(vocabulary.encode(c, 20)) for p in readable for c in records[p].references]
    expected = sorted(tuple(t[t != PAD_ID]) for t in words)
    seen, dropped = [], []
    for pad, out in ((True, seen), (False, dropped)):
        for batch in as_numpy(batches_of(mode, source, records, vocabulary, pad=pad)):
            tokens = batch["tokens"]
            image_side = next(batch[k] for k in ("features", "image_index") if k in batch)
            # One static shape: every batch as full as the plan's batch size.
            assert image_side.shape[0] == tokens.shape[0] == (2 if mode == "per_image" else 4)
            if "image_index" in batch:
                assert (image_side >= 0).all()  # padding reads a real row, weighing nothing
            rows = tokens.reshape(-1, tokens.shape[-1])
            out += [tuple(r[r != PAD_ID]) for r in rows if (r != PAD_ID).any()]
    assert sorted(seen) == expected  # each caption once
    assert len(dropped) < len(seen)  # dropping leaves some out


@pytest.mark.parametrize("partial", ["pad", "drop"])
@pytest.mark.parametrize("mode", ["per_caption", "per_image"])
def test_an_epoch_holds_the_steps_its_batching_counts(world, mode, partial):
    records, folder, vocabulary = world
    cache = FeatureCache(folder)
    settings = {"partial_batches": partial, "batching": mode, "shuffle_buffer": 1000}
    config = from_dict({"data": settings, "train": {"batch_size": 15}})
    batches = batching(config, records, cache, 1)
    plan = batches.plan(config.data, seed=3)
    epoch = list(
        caption_batches(cache, "train", records, token_table(records, vocabulary, 20), plan)
    )
    # 38 readable images of 5 captions in one window: 190 captions in batches of 15, or
    # 38 images in batches of 3; 12 full batches and a partial one, padded or dropped.
    assert len(epoch) == batches.steps == (13 if partial == "pad" else 12)
    # A split smaller than one batch: one padded batch, or an error that says what to change.
    bigger = from_dict({"data": settings, "train": {"batch_size": 200}})
    if partial == "pad":
        assert batching(bigger, records, cache, 1).steps == 1
    else:
        with pytest.raises(KerasSaatError, match="or set data.partial_batches pad$"):
            batching(bigger, records, cache, 1)


def test_a_resumed_epoch_reads_only_the_windows_from_its_batch(world):
    records, folder, vocabulary = world
    cache = RecordingCache(folder)
    whole = list(batches_of("caption", cache, records, vocabulary))
    assert sorted(cache.parsed) == [p for p in range(40) if p not in SKIPPED]  # each image once

    # The plan says which window holds the last batch; resuming there reads that window alone.
    shards = cache.shard_positions("train")
    row_splits = np.concatenate([[0], np.cumsum([len(r.captions) for r in records])])
    plan = epoch_plan(shards, row_splits, 4, 3, 30)
    assert len(plan["positions"]) == len(whole)
    last = from_step(plan, len(whole) - 1)
    window = plan["window_shards"][int(last["windows"][0])]
    cache.parsed.clear()
    resumed = list(batches_of("caption", cache, records, vocabulary, start_step=len(whole) - 1))
    assert len(resumed) == 1
    np.testing.assert_array_equal(resumed[0]["tokens"], whole[-1]["tokens"])
    assert sorted(cache.parsed) == sorted(int(p) for s in window for p in shards[s])
    assert len(cache.parsed) < 40 - len(SKIPPED)


def test_the_plan_is_a_function_of_the_seed_and_uses_each_unit_at_most_once(world):
    records, folder, _ = world
    shards = FeatureCache(folder).shard_positions("train")
    row_splits = np.concatenate([[0], np.cumsum([len(r.captions) for r in records])])
    a, b = epoch_plan(shards, row_splits, 4, 3, 30), epoch_plan(shards, row_splits, 4, 3, 30)
    for key in ("positions", "rows", "windows"):
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["rows"], epoch_plan(shards, row_splits, 4, 4, 30)["rows"])
    rows = a["rows"].ravel()
    assert len(set(rows.tolist())) == len(rows)  # no caption twice
    readable = sum(len(r.captions) for p, r in enumerate(records) if p not in SKIPPED)
    windows = len(a["window_shards"])
    assert readable - windows * 3 <= len(rows) <= readable  # a partial batch a window at most
    # Every caption's image is the position the plan names beside it.
    np.testing.assert_array_equal(
        np.searchsorted(row_splits, a["rows"], side="right") - 1, a["positions"]
    )


def test_a_cache_whose_index_names_other_images_than_its_shards_is_refused(world, tmp_path):
    records, folder, vocabulary = world
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    index = json.loads((copy / "index.json").read_text())
    index["splits"]["train"]["shards"][0]["skipped"] = [[0, "undecodable image"]]  # not 4
    (copy / "index.json").write_text(json.dumps(index))
    cache = FeatureCache(copy)
    expected = (
        r"^the feature cache in .* holds other train images than its index.json says; "
        "delete the folder to extract again$"
    )
    with pytest.raises(KerasSaatError, match=expected):  # the training run's one line
        with naming_damaged_shards(cache.shard_files(["train"])):
            list(batches_of("caption", cache, records, vocabulary))
