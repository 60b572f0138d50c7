"""Extraction records each finished shard by appending a line, not by rewriting index.json,
and decodes every shard's images with one graph traced once a process."""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.data import read_karpathy
from keras_saat.data.feature_cache import cache_index, feature_extraction
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.encoders import ImageEncoder

PROGRESS = "progress.jsonl"  # the layout the module docstring documents


@pytest.fixture(scope="module")
def encoder():
    tf.keras.utils.set_random_seed(0)
    return ImageEncoder("shapes_cnn")


@pytest.fixture(scope="module")
def extracted(shapes_dir, encoder, tmp_path_factory):
    """A cache in shards of 4 (10 train, 2 val, 2 test), and the index writes it took."""
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    directory = tmp_path_factory.mktemp("progress") / "cache"
    writes = []
    real = cache_index.write_json_atomic

    def counted(path, content, **kwargs):
        writes.append(path)
        return real(path, content, **kwargs)

    cache_index.write_json_atomic = counted
    try:
        extract_features(encoder, dataset, directory, shard_size=4, log=lambda _: None)
    finally:
        cache_index.write_json_atomic = real
    return dataset, directory, writes


@pytest.mark.slow
def test_index_json_is_written_a_few_times_not_once_a_shard(extracted):
    _, directory, writes = extracted
    index = json.loads((directory / "index.json").read_text())
    assert sum(len(s["shards"]) for s in index["splits"].values()) == 14
    assert len(writes) == 4  # each split's shard list, then the compaction at the end
    assert all(s["done"] for split in index["splits"].values() for s in split["shards"])
    assert not (directory / PROGRESS).exists()
    assert FeatureCache(directory).count("train") == 40


@pytest.mark.slow
def test_a_killed_extraction_resumes_from_the_progress_lines(extracted, encoder, tmp_path):
    dataset, directory, _ = extracted
    killed = tmp_path / "killed"
    killed.mkdir()
    index = json.loads((directory / "index.json").read_text())
    progress = []
    for split, entry in index["splits"].items():
        for number, shard in enumerate(entry["shards"]):
            if split == "train" and number < 3:  # finished before the kill
                (killed / shard["file"]).write_bytes((directory / shard["file"]).read_bytes())
                line = {"split": split, "shard": number, "written": shard["written"]}
                line.update(skipped=shard["skipped"], inputs=shard["inputs"])
                progress.append(json.dumps(line))
            shard.update(done=False, written=0, skipped=[], inputs=None)
    del index["splits"]["val"], index["splits"]["test"]
    (killed / "index.json").write_text(json.dumps(index))
    # The third line was torn by the kill: its shard is written again.
    (killed / PROGRESS).write_text("\n".join(progress[:2]) + "\n" + progress[2][:20])
    partial = FeatureCache(killed)
    assert [s["done"] for s in partial.index["splits"]["train"]["shards"][:4]] == [1, 1, 0, 0]
    kept = (killed / "train-00000-of-00010.tfrecord").stat().st_mtime_ns
    lines = []
    cache, _ = extract_features(encoder, dataset, killed, shard_size=4, log=lines.append)
    assert any("2/10 shards already done, extracting the other 8" in line for line in lines)
    assert (killed / "train-00000-of-00010.tfrecord").stat().st_mtime_ns == kept
    assert not (killed / PROGRESS).exists()
    reference = FeatureCache(directory)
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(cache.load(split)[1], reference.load(split)[1])


def test_every_shard_decodes_through_one_graph_and_builds_no_pipeline(
    shapes_dir, encoder, tmp_path, monkeypatch
):
    """Once a process has traced the batch decoder `Captioner.generate` uses, extraction
    builds no tf.data pipeline (each shard's would be optimised and instantiated again),
    reads each shard's files once, and the cache holds what the encoder makes of
    `load_images`' pixels."""
    from keras_saat.images.decoding import load_images

    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    extract_features(encoder, dataset, tmp_path / "a", shard_size=9, log=lambda _: None)
    pipelines, reads = [], []
    real_slices, real_reader = (
        tf.data.Dataset.from_tensor_slices,
        feature_extraction.decoded_batches,
    )
    monkeypatch.setattr(
        tf.data.Dataset, "from_tensor_slices",
        staticmethod(lambda *a, **k: pipelines.append(1) or real_slices(*a, **k)),
    )  # fmt: skip
    monkeypatch.setattr(
        feature_extraction, "decoded_batches",
        lambda paths, *a: reads.append(len(paths)) or real_reader(paths, *a),
    )  # fmt: skip
    extract_features(encoder, dataset, tmp_path / "b", shard_size=9, log=lambda _: None)
    monkeypatch.undo()
    assert pipelines == [] and reads == [9, 9, 9, 9, 4, 8, 8]  # 40 train, 8 val, 8 test
    positions, stored = FeatureCache(tmp_path / "b").load("train")
    paths = [r.path for r in dataset.split("train")]
    assert positions.tolist() == list(range(len(paths)))
    expected = encoder(load_images(paths, 128)).numpy()  # float16 in the cache
    np.testing.assert_allclose(stored, expected, rtol=2e-3, atol=2e-3)


def test_an_image_file_over_the_read_limit_is_one_skip(shapes_dir, encoder, tmp_path):
    import shutil

    shutil.copytree(shapes_dir, tmp_path / "shapes")
    dataset = read_karpathy(tmp_path / "shapes" / "dataset_shapes.json")
    record = dataset.split("val")[3]
    with open(record.path, "r+b") as f:  # sparse: over the limit on disk, nothing written
        f.truncate((64 << 20) + 1)
    _, skips = extract_features(
        encoder, dataset, tmp_path / "cache", splits=("val",), log=lambda _: None
    )
    place = f"{record.path} (image {record.imgid})"
    assert dict(skips.where) == {"image file over 64 MiB": [place]}
    index = json.loads((tmp_path / "cache" / "index.json").read_text())
    assert index["splits"]["val"]["shards"][0]["skipped"] == [[3, "undecodable image"]]
