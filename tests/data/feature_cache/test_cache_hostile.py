"""A feature cache's bookkeeping and records crafted to escape the cache folder or slip
past training: every name is the layout's own, every record's scales and position are
checked, each refusal one line."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.data import read_karpathy
from keras_saat.data.feature_cache.cache_format import feature_example
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.data.feature_cache.shard_checks import naming_damaged_shards
from keras_saat.encoders import ImageEncoder
from keras_saat.errors import KerasSaatError
from tests.support.synthetic_data import write_synthetic_cache

SIZE = {"locations": 4, "channels": 8}


def test_a_shard_name_out_of_the_cache_is_refused_before_anything_is_written(shapes_dir, tmp_path):
    shutil.copytree(shapes_dir, tmp_path / "shapes")
    dataset = read_karpathy(tmp_path / "shapes" / "dataset_shapes.json")
    tf.keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn")
    quiet = lambda _: None  # noqa: E731
    folder = tmp_path / "work" / "features"
    extract_features(encoder, dataset, folder, splits=("train",), shard_size=16, log=quiet)
    victim = tmp_path / "victim.tfrecord"
    victim.write_text("precious")
    index = json.loads((folder / "index.json").read_text())
    index["splits"]["train"]["shards"][1].update(file="../../victim.tfrecord", done=False)
    (folder / "index.json").write_text(json.dumps(index))
    message = "names '../../victim.tfrecord' for train's shard 1, not 'train-00001-of-00003"
    with pytest.raises(KerasSaatError, match=message):
        extract_features(encoder, dataset, folder, splits=("train",), shard_size=16, log=quiet)
    with pytest.raises(KerasSaatError, match=message):
        FeatureCache(folder)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ('{"version": 2, "splits": {', "is damaged \\(not JSON\\)"),
        ("[" * 100_000 + "]" * 100_000, "is damaged \\(not JSON\\)"),
        ('{"version": 2, "grid": [2, 2], "channels": 8, "dtype": "float16", "splits": '
         '{"../x": {"count": 1, "shard_size": 1, "shards": []}}}', "names a split '../x'"),
        ('{"version": 2, "grid": ["a", 2], "channels": 8, "dtype": "float16", "splits": {}}',
         "no feature grid and channels"),
    ],
)  # fmt: skip
def test_a_damaged_index_is_one_line(tmp_path, index, message):
    (tmp_path / "index.json").write_text(index)
    with pytest.raises(KerasSaatError, match=message):
        FeatureCache(tmp_path)


@pytest.mark.parametrize(
    "entry",
    [{"written": 10**13}, {"written": -1}, {"skipped": [5]}, {"skipped": [[99, "x"]]},
     {"done": None}],
)  # fmt: skip
def test_a_shard_entry_of_another_shape_refuses_the_cache(tmp_path, entry):
    write_synthetic_cache(tmp_path, 8, SIZE, shard_size=8)
    index = json.loads((tmp_path / "index.json").read_text())
    index["splits"]["train"]["shards"][0].update(entry)
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(KerasSaatError, match="has a malformed entry for train's shard 0"):
        FeatureCache(tmp_path)


def test_a_deep_progress_line_is_ignored_as_a_torn_one(tmp_path):
    write_synthetic_cache(tmp_path, 8, SIZE, shard_size=8)
    (tmp_path / "progress.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n" +
                                             '{"split": "train", "shard": -1}\n' +
                                             '{"split": "train", "shard": 0, "written": Infinity,'
                                             ' "skipped": []}\n')  # fmt: skip
    assert FeatureCache(tmp_path).count("train") == 8


def crafted_shard(folder, records):
    """A one-shard int8 cache of 8 positions whose records are `records` [(position, row
    bytes or None)]: None keeps a real row."""
    write_synthetic_cache(folder, 8, SIZE, shard_size=8, dtype="int8")
    shard = folder / "train-00000-of-00001.tfrecord"
    rows = np.random.default_rng(0).standard_normal((SIZE["locations"], SIZE["channels"]))
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for position, replace in records:
            example = tf.train.Example.FromString(feature_example(position, rows, "int8"))
            if replace is not None:
                data = example.features.feature["features"].bytes_list.value
                data[0] = replace(data[0])
            writer.write(example.SerializeToString())
    index = json.loads((folder / "index.json").read_text())
    index["splits"]["train"]["shards"][0]["bytes"] = shard.stat().st_size
    (folder / "index.json").write_text(json.dumps(index))


def nan_scale(data):
    return np.array([np.nan], np.float16).tobytes() + data[2:]


@pytest.mark.parametrize(
    ("records", "streamed", "resident"),
    [
        ([(p, None) for p in range(7)] + [(7, nan_scale)],
         "int8 channel scales are not finite", "int8 channel scales are not finite"),
        ([(p, None) for p in range(7)] + [(1_000_000, None)],
         "position is outside the 8 images of its split", "position is outside the 8 images"),
    ],
)  # fmt: skip
def test_a_crafted_record_is_named_on_the_streamed_and_resident_paths(
    tmp_path, records, streamed, resident
):
    crafted_shard(tmp_path, records)
    cache = FeatureCache(tmp_path)
    with pytest.raises(KerasSaatError, match=streamed):
        with naming_damaged_shards(cache.files("train")):
            list(cache.dataset("train"))
    with pytest.raises(KerasSaatError, match=resident):
        ResidentFeatures(cache, "train")


def test_a_shards_content_hash_reads_only_regular_files_and_never_waits_on_a_fifo(tmp_path):
    """`shard_content` reads what the extraction reads: a FIFO, a folder or a missing file
    count as unread (a FIFO with no writer is never opened blocking), a changed byte
    changes the hash, and a streamed image (no file) gives no hash."""
    import os
    import threading

    from keras_saat.data.feature_cache.cache_format import shard_content
    from keras_saat.data.readers.caption_dataset import ImageRecord

    image = tmp_path / "a.png"
    image.write_bytes(b"pixels")
    fifo = tmp_path / "b.png"
    os.mkfifo(fifo)
    (tmp_path / "c.png").mkdir()
    paths = [image, fifo, tmp_path / "c.png", tmp_path / "gone.png"]
    records = [ImageRecord(i, p, "train", ["a caption"]) for i, p in enumerate(paths)]
    found = []
    reader = threading.Thread(target=lambda: found.append(shard_content(records)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive() and isinstance(found[0], str)  # did not wait on the FIFO
    image.write_bytes(b"pixelz")
    assert shard_content(records) != found[0]
    image.write_bytes(b"pixels")
    assert shard_content(records) == found[0]
    assert shard_content([ImageRecord(0, None, "train", ["a caption"])]) is None
    # A reader's stamp that is not the file's now (it changed since the reader looked):
    # no hash, so the shard is never kept on bytes other than those stamped.
    stale = ImageRecord(0, image, "train", ["a caption"], stamp="6|1")
    assert shard_content([stale]) is None
    stamped = f"{image.stat().st_size}|{image.stat().st_mtime_ns}"
    assert shard_content([ImageRecord(0, image, "train", ["a caption"], stamp=stamped)])
