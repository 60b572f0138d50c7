"""The feature cache: exact round trip, same loss as images, resume, bad images, staleness."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_saat import Captioner
from keras_saat.data import read_karpathy, read_tfds
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.image_file_source import ImageFiles
from keras_saat.data.pipeline.input_pipeline import caption_batches, token_table
from keras_saat.encoders import ImageEncoder
from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import decode_image
from keras_saat.text import END_ID, PAD_ID, START_ID, Vocabulary
from tests.helpers import coco_captions_examples


@pytest.fixture
def shapes_copy(shapes_dir, tmp_path):
    target = tmp_path / "shapes"
    shutil.copytree(shapes_dir, target)
    return read_karpathy(target / "dataset_shapes.json")


@pytest.fixture(scope="module")
def encoder():
    tf.keras.utils.set_random_seed(0)
    return ImageEncoder("shapes_cnn")


def decoded(records, size=128):
    return np.stack([decode_image(tf.io.read_file(str(r.path)), size).numpy() for r in records])


@pytest.mark.slow
def test_float32_cache_equals_the_encoder_on_decoded_images(shapes_copy, encoder, tmp_path):
    cache, skips = extract_features(
        encoder, shapes_copy, tmp_path / "c", shard_size=16, dtype="float32", log=lambda _: None
    )
    assert skips.total == 0 and cache.count("train") == 40 and cache.grid_shape == (8, 8)
    positions, features = cache.load("train")
    np.testing.assert_array_equal(positions, np.arange(40))
    expected = encoder(decoded(shapes_copy.split("train"))).numpy()
    np.testing.assert_allclose(features, expected, rtol=1e-6, atol=1e-6)
    index = json.loads((tmp_path / "c" / "index.json").read_text())
    assert [s["file"] for s in index["splits"]["train"]["shards"]] == [
        f"train-0000{i}-of-00003.tfrecord" for i in range(3)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("float16", 2e-3)])
def test_training_from_images_and_from_the_cache_give_the_same_loss(
    shapes_copy, encoder, tmp_path, dtype, tolerance
):
    records = shapes_copy.split("train")
    vocab = Vocabulary.build(c for r in records for c in r.references)
    model = Captioner(
        vocab.words,
        feature_dim=32,
        embedding_dim=16,
        lstm_units=32,
        attention_units=16,
        dropout=0.0,
    )
    model.encoder.feature_model.set_weights(encoder.feature_model.get_weights())
    cache, _ = extract_features(
        encoder, shapes_copy, tmp_path / dtype, shard_size=64, dtype=dtype, log=lambda _: None
    )
    tokens, plan = token_table(records, vocab, 20), BatchPlan(16, shuffle_buffer=0)
    from_cache = next(iter(caption_batches(cache, "train", records, tokens, plan)))
    images = ImageFiles(128)
    from_images = next(iter(caption_batches(images, "train", records, tokens, plan)))
    np.testing.assert_array_equal(from_cache["tokens"], from_images["tokens"])
    loss_cache = model.loss_terms(model(from_cache), from_cache["tokens"])["loss"]
    loss_images = model.loss_terms(model(from_images), from_images["tokens"])["loss"]
    np.testing.assert_allclose(float(loss_cache), float(loss_images), rtol=tolerance)


@pytest.mark.slow
def test_a_killed_extraction_resumes_keeping_finished_shards(shapes_copy, encoder, tmp_path):
    quiet = lambda _: None  # noqa: E731
    reference, _ = extract_features(
        encoder, shapes_copy, tmp_path / "full", shard_size=16, log=quiet
    )
    directory = tmp_path / "killed"
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=quiet)
    # What SIGKILL during shard 2 of train leaves: shard 2 not recorded, a partial temporary
    # (`atomic_path`'s name for it), and nothing yet for val and test.
    index = json.loads((directory / "index.json").read_text())
    shard = index["splits"]["train"]["shards"][2]
    shard.update(done=False, written=0)
    partial = directory / f".{shard['file']}.0123456789ab.tmp"
    os.replace(directory / shard["file"], partial)
    with open(partial, "r+b") as f:
        f.truncate(100)
    del index["splits"]["val"], index["splits"]["test"]
    (directory / "index.json").write_text(json.dumps(index))
    kept = {
        name: (directory / name).stat().st_mtime_ns for name in ("train-00000-of-00003.tfrecord",)
    }
    lines = []
    cache, _ = extract_features(encoder, shapes_copy, directory, shard_size=16, log=lines.append)
    assert any("2/3 shards already done, extracting the other 1" in line for line in lines)
    assert (directory / "train-00000-of-00003.tfrecord").stat().st_mtime_ns == kept[
        "train-00000-of-00003.tfrecord"
    ]
    assert not partial.exists()
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(cache.load(split)[1], reference.load(split)[1])
    only_val = tmp_path / "by_split"  # splits extracted by separate runs share one cache
    extract_features(encoder, shapes_copy, only_val, splits=("val",), log=quiet)
    np.testing.assert_array_equal(
        extract_features(encoder, shapes_copy, only_val, splits=("train",), log=quiet)[0].load(
            "train"
        )[1],
        reference.load("train")[1],
    )
    again = []
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=again.append)
    assert again[:3] == [
        "  extract train: cached (40 images)",
        "  extract val: cached (8 images)",
        "  extract test: cached (8 images)",
    ]


@pytest.mark.slow
def test_missing_and_corrupt_images_are_skipped_counted_and_named(shapes_copy, encoder, tmp_path):
    train = shapes_copy.split("train")
    train[3].path.write_bytes(b"\xff\xd8\xff\xe0 truncated jpeg")
    train[5].path.unlink()
    lines = []
    cache, skips = extract_features(
        encoder, shapes_copy, tmp_path / "c", shard_size=16, log=lines.append
    )
    assert cache.count("train") == 38
    assert sorted(cache.skipped("train")) == [(3, "undecodable image"), (5, "missing image file")]
    assert f"  skipped 1 x missing image file (first: {train[5].path} (image 5))" in lines
    assert f"  skipped 1 x undecodable image (first: {train[3].path} (image 3))" in lines
    vocab = Vocabulary.build(c for r in train for c in r.references)
    pairs = sum(
        b["tokens"].shape[0]
        for b in caption_batches(
            cache, "train", train, token_table(train, vocab, 20), BatchPlan(7, drop_remainder=False)
        )
    )
    assert pairs == 5 * 38
    quiet = lambda _: None  # noqa: E731
    with pytest.raises(
        KerasSaatError, match=r"000005.png \(image 5\): missing image file \(strict"
    ):
        extract_features(
            encoder, shapes_copy, tmp_path / "s1", shard_size=16, strict=True, log=quiet
        )
    shutil.copy(train[4].path, train[5].path)
    with pytest.raises(KerasSaatError, match=r"000003.png \(image 3\): undecodable image \(strict"):
        extract_features(
            encoder, shapes_copy, tmp_path / "s2", shard_size=16, strict=True, log=quiet
        )


def test_a_changed_image_extracts_only_its_shard_again(shapes_copy, encoder, tmp_path):
    quiet = lambda _: None  # noqa: E731
    directory = tmp_path / "c"
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=quiet)
    shards = [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    before = {name: (directory / name).stat().st_mtime_ns for name in shards}
    train = shapes_copy.split("train")
    shutil.copy(train[1].path, train[20].path)  # shard 1's image 20: other pixels, same name
    lines = []
    cache, _ = extract_features(encoder, shapes_copy, directory, shard_size=16, log=lines.append)
    assert "  extract train: images changed in 1 shard(s) since extraction" in lines
    assert any("2/3 shards already done, extracting the other 1" in line for line in lines)
    after = {name: (directory / name).stat().st_mtime_ns for name in shards}
    assert after[shards[0]] == before[shards[0]] and after[shards[2]] == before[shards[2]]
    assert after[shards[1]] != before[shards[1]]
    features = cache.load("train")[1]
    # The new pixels' features (to the last bits: image 1 was encoded in another batch, and
    # oneDNN may pick another convolution for another batch's shape).
    np.testing.assert_allclose(features[20], features[1], rtol=0.02, atol=1e-5)
    assert not np.allclose(features[20], features[21], rtol=0.02, atol=1e-5)
    lines.clear()
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=lines.append)
    assert "  extract train: cached (40 images)" in lines  # recorded: not extracted a third time


def test_a_borrowed_cache_is_read_as_it_is_or_refused_and_never_written(
    shapes_copy, encoder, tmp_path
):
    """`data.feature_cache`: another workdir's finished cache is checked and read; a
    changed image or an unfinished split is named, and nothing in the folder changes."""
    from keras_saat.config import load_config
    from keras_saat.data.feature_cache.borrowed_cache import open_finished
    from keras_saat.experiment.preparation import check_feature_cache

    quiet = lambda _: None  # noqa: E731
    directory = tmp_path / "c"
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=quiet)

    def state():
        return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}

    before, lines = state(), []
    index = open_finished(directory, encoder, shapes_copy, "crop", "float16", "none", lines.append)
    assert index == FeatureCache(directory).index
    assert lines == [f"  extract {s}: cached ({n} images)" for s, n in (("train", 40), ("val", 8), ("test", 8))]  # fmt: skip
    with pytest.raises(KerasSaatError, match=r"was made with dtype float16 \(this run: int8\)"):
        open_finished(directory, encoder, shapes_copy, "crop", "int8", "none", quiet)
    tf.keras.utils.set_random_seed(1)
    other = ImageEncoder("shapes_cnn")  # the same backbone, other random weights
    with pytest.raises(KerasSaatError, match="same backbone with other weights: point model"):
        open_finished(directory, other, shapes_copy, "crop", "float16", "none", quiet)
    train = shapes_copy.split("train")
    original = train[20].path.read_bytes()
    shutil.copy(train[1].path, train[20].path)  # shard 1's image 20: other pixels
    with pytest.raises(KerasSaatError, match=r"images of the train split changed .*\(1 shard"):
        open_finished(directory, encoder, shapes_copy, "crop", "float16", "none", quiet)
    train[20].path.write_bytes(original)  # the same bytes again (new time): read as it is
    open_finished(directory, encoder, shapes_copy, "crop", "float16", "none", quiet)
    # Before the run renders data or pre-trains: a finished cache, and no CNN of its own.
    owner, run = tmp_path / "owner", tmp_path / "run"
    shutil.copytree(directory, owner / "features")

    def check(cache, *settings):
        config = load_config(None, [f"data.feature_cache={cache}", *settings])
        check_feature_cache(config, run)

    check(owner / "features")
    with pytest.raises(KerasSaatError, match="no feature cache there"):
        check(owner)
    (owner / "backbone.weights.h5").write_bytes(b"")  # the CNN that made the cache
    shapes = ["model.backbone=shapes_cnn", "model.backbone_weights=shapes"]
    with pytest.raises(KerasSaatError) as caught:
        check(owner / "features", *shapes)
    assert "would pre-train a Shapes CNN of its own" in str(caught.value)
    assert str(caught.value).endswith(
        f"set model.backbone_weights to {owner / 'backbone.weights.h5'}"
    )
    with pytest.raises(KerasSaatError, match="to the weights file that made the cache$"):
        check(directory, *shapes)  # not a workdir's features folder: no file guessed
    check(tmp_path / "none", *shapes, "model.trainable_backbone_layers=1")  # reads no cache
    check(owner / "features", "model.backbone=vgg16", "model.backbone_weights=shapes")
    run.mkdir()
    (run / "backbone.weights.h5").write_bytes(b"")  # pre-trained already: none to make
    check(owner / "features", *shapes)
    (directory / "val-00000-of-00001.tfrecord").unlink()  # damaged, deleted
    for refused in (
        lambda: open_finished(directory, encoder, shapes_copy, "crop", "float16", "none", quiet),
        lambda: check(directory),
    ):
        with pytest.raises(KerasSaatError, match="has the val split unfinished"):
            refused()
    del before["val-00000-of-00001.tfrecord"]
    assert state() == before


def test_a_shard_written_again_while_a_run_reads_the_cache_is_named(tmp_path):
    """Each epoch asks the cache for its shards again: one that another run wrote anew
    since (the same bytes, even: a new file) is named, never read into the run."""
    from tests.support.synthetic_data import write_synthetic_cache

    write_synthetic_cache(tmp_path, 24, {"locations": 4, "channels": 8}, shard_size=8)
    cache = FeatureCache(tmp_path)
    first = cache.files("train")
    assert cache.files("train") == first  # untouched: the same files every epoch
    shard = tmp_path / "train-00001-of-00003.tfrecord"
    data, written = shard.read_bytes(), shard.stat().st_mtime_ns
    shard.unlink()
    shard.write_bytes(data)  # written again, as an extraction writes a shard,
    os.utime(shard, ns=(written + 10**9, written + 10**9))  # a second later at least
    replaced = f"the feature cache shard {shard} was replaced since this run first read it"
    with pytest.raises(KerasSaatError, match=f"^{re.escape(replaced)}"):
        cache.files("train")
    assert FeatureCache(tmp_path).files("train") == first  # a new run reads it as it is
    later = FeatureCache(tmp_path)
    later.files("train")
    shard.write_bytes(data[: len(data) // 2])  # another size: replaced, not called damaged
    with pytest.raises(KerasSaatError, match=f"^{re.escape(replaced)}"):
        later.files("train")


def test_a_dataset_copied_without_its_file_times_keeps_its_features(shapes_copy, encoder, tmp_path):
    """A copy that gives every image a new modification time (`cp -r`, scp, an object
    store) reads its shards' bytes once, keeps the features of those whose bytes are the
    same and extracts only the shard whose image changed; the kept shards' records take
    the new times, so a third run reads no bytes."""
    quiet = lambda _: None  # noqa: E731
    directory = tmp_path / "c"
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=quiet)
    shards = sorted(p.name for p in directory.glob("train-*.tfrecord"))
    before = {name: (directory / name).read_bytes() for name in shards}
    moved = tmp_path / "elsewhere"
    shutil.copytree(shapes_copy.split("train")[0].path.parents[1], moved, copy_function=shutil.copy)
    copied = read_karpathy(moved / "dataset_shapes.json")
    train = copied.split("train")
    old = shapes_copy.split("train")[0].path.stat().st_mtime_ns
    os.utime(train[0].path, ns=(old + 10**9, old + 10**9))  # new times even on a coarse clock
    shutil.copy(train[1].path, train[20].path)  # shard 1: other bytes
    lines = []
    extract_features(encoder, copied, directory, shard_size=16, log=lines.append)
    assert "  extract train: 2 shard(s) kept: new file times, same bytes" in lines
    assert "  extract train: images changed in 1 shard(s) since extraction" in lines
    after = {name: (directory / name).read_bytes() for name in shards}
    assert [after[n] == before[n] for n in shards] == [True, False, True]
    lines.clear()
    extract_features(encoder, copied, directory, shard_size=16, log=lines.append)
    assert "  extract train: cached (40 images)" in lines
    assert not any("kept: new file times" in line for line in lines)  # the times recorded


def test_a_reopened_shard_is_not_done_on_disk_before_its_file_is_replaced(
    shapes_copy, encoder, tmp_path
):
    """A run killed while it re-extracts a changed shard leaves that shard not done in
    index.json (and hashing nothing), so bytes put back later under new times cannot
    keep the features of the bytes it was re-extracting."""
    quiet = lambda _: None  # noqa: E731
    directory = tmp_path / "c"
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=quiet)
    train = shapes_copy.split("train")
    original = train[20].path.read_bytes()
    shutil.copy(train[1].path, train[20].path)  # shard 1: other bytes

    def killed(line):
        if "images changed in 1 shard(s)" in line:
            raise KeyboardInterrupt  # as a kill would, before any shard file is written

    with pytest.raises(KeyboardInterrupt):
        extract_features(encoder, shapes_copy, directory, shard_size=16, log=killed)
    shard = json.loads((directory / "index.json").read_text())["splits"]["train"]["shards"][1]
    assert shard["done"] is False and shard["content"] is None
    train[20].path.write_bytes(original)  # the old bytes back, under a new time
    lines = []
    extract_features(encoder, shapes_copy, directory, shard_size=16, log=lines.append)
    assert not any("kept: new file times" in line for line in lines)
    assert any("2/3 shards already done, extracting the other 1" in line for line in lines)


def test_a_cache_keeps_the_shard_size_it_was_made_with(shapes_copy, encoder, tmp_path):
    quiet = lambda _: None  # noqa: E731
    directory = tmp_path / "c"
    reference, _ = extract_features(encoder, shapes_copy, directory, shard_size=16, log=quiet)
    expected = reference.load("train")[1]
    index = json.loads((directory / "index.json").read_text())
    shard = index["splits"]["train"]["shards"][1]  # killed while writing shard 1 of 3
    shard.update(done=False, written=0)
    (directory / shard["file"]).unlink()
    (directory / "index.json").write_text(json.dumps(index))
    lines = []
    cache, _ = extract_features(encoder, shapes_copy, directory, shard_size=10, log=lines.append)
    assert "  extract train: the cache keeps its shards of 16 images (a shard size of 10 applies to a new cache)" in lines  # fmt: skip
    assert len(cache.files("train")) == 3
    positions, features = cache.load("train")
    np.testing.assert_array_equal(positions, np.arange(40))
    np.testing.assert_array_equal(features, expected)


def test_a_cache_of_another_layout_version_is_named(shapes_copy, encoder, tmp_path):
    directory = tmp_path / "c"
    extract_features(encoder, shapes_copy, directory, splits=("val",), log=lambda _: None)
    index = json.loads((directory / "index.json").read_text())
    (directory / "index.json").write_text(json.dumps({**index, "version": 1}))
    with pytest.raises(
        KerasSaatError, match="layout of version 1, this keras-saat reads version 2"
    ):
        extract_features(encoder, shapes_copy, directory, splits=("val",), log=lambda _: None)


def test_a_cache_from_other_weights_is_refused(shapes_copy, encoder, tmp_path):
    extract_features(encoder, shapes_copy, tmp_path / "c", log=lambda _: None)
    other = ImageEncoder("shapes_cnn")
    with pytest.raises(KerasSaatError, match="made with another backbone, weights"):
        extract_features(other, shapes_copy, tmp_path / "c", log=lambda _: None)
    with pytest.raises(KerasSaatError, match="no feature cache"):
        FeatureCache(tmp_path / "nothing")


@pytest.mark.slow
def test_tfds_images_stream_into_the_cache(tmp_path):
    encoder = ImageEncoder("shapes_cnn", image_size=32)
    with tfds.testing.mock_data(as_dataset_fn=coco_captions_examples):
        dataset = read_tfds("coco_captions", data_dir=str(tmp_path))
        cache, skips = extract_features(
            encoder, dataset, tmp_path / "c", shard_size=4, log=lambda _: None
        )
    assert skips.total == 0 and cache.count("train") == 6 and cache.count("test") == 3
    positions, features = cache.load("train")
    np.testing.assert_array_equal(positions, np.arange(6))
    assert features.shape == (6, 4, 128)


@pytest.mark.slow
def test_caption_batches_use_every_caption_once_and_bucket_by_length(
    shapes_copy, encoder, tmp_path
):
    records = shapes_copy.split("train")
    vocab = Vocabulary.build(c for r in records for c in r.references)
    cache, _ = extract_features(
        encoder, shapes_copy, tmp_path / "c", shard_size=16, log=lambda _: None
    )
    expected = [tuple(vocab.encode(c, 20)) for r in records for c in r.references]
    # One static width: the longest caption's, not max_length's (20 words + 2 is longer).
    width = max(len(t) for t in expected)
    assert width < 22
    seen = []
    tokens = token_table(records, vocab, 20)
    plan = BatchPlan(8, seed=1, drop_remainder=False)
    for batch in caption_batches(cache, "train", records, tokens, plan):
        ids = batch["tokens"].numpy()
        # The features travel in the cache's dtype; the model casts them on the device.
        assert ids.shape[1] == width and batch["features"].dtype == tf.float16
        assert (ids[:, 0] == START_ID).all() and ((ids == END_ID).sum(1) == 1).all()
        seen += [tuple(t[t != PAD_ID]) for t in ids]
    assert sorted(seen) == sorted(expected)
    # A max_length below the longest caption cuts captions to it, and the width with them.
    cut = [tuple(vocab.encode(c, 6)) for r in records for c in r.references]
    # Unshuffled, each shard is a window, its last batch partial.
    plan = BatchPlan(50, shuffle_buffer=0, drop_remainder=False)
    batches = list(caption_batches(cache, "train", records, token_table(records, vocab, 6), plan))
    assert {b["tokens"].shape[1] for b in batches} == {8}
    seen_cut = [tuple(t[t != PAD_ID]) for b in batches for t in b["tokens"].numpy()]
    assert sorted(seen_cut) == sorted(cut)
    widths = set()
    count = 0
    plan = BatchPlan(4, seed=1, bucket_by_length=True, drop_remainder=False)
    for batch in caption_batches(cache, "train", records, tokens, plan):
        widths.add(batch["tokens"].shape[1])
        count += batch["tokens"].shape[0]
    assert count == 200 and widths <= {8, 11, 14, 17, width} and len(widths) > 1
    positions = np.concatenate(
        [b["position"].numpy() for b in cache.evaluation_batches("val", None, 3)]
    )
    np.testing.assert_array_equal(np.sort(positions), np.arange(8))
    # Every pipeline a run iterates once an epoch has the autotuner off: with it, the step
    # after an iterator's end could wait seconds with the CPU idle (runtime/pipeline_options.py).
    images = ImageFiles(128)
    for ds in (
        caption_batches(cache, "train", records, tokens, BatchPlan(8)),
        caption_batches(images, "train", records, tokens, BatchPlan(8)),
        caption_batches(cache, "train", records, tokens, BatchPlan(4, 5, shuffle_buffer=1000)),
        cache.evaluation_batches("val", None, 3),
        images.evaluation_batches("val", shapes_copy.split("val"), 3),
    ):
        assert ds.options().autotune.enabled is False
