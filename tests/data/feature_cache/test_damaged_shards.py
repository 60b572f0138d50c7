"""Damaged feature cache shards: a truncated or bit-flipped shard is a one-line error
naming the file and what to do, on every path that reads the cache; a deleted shard is
extracted again."""

import json
import re
import shutil

import pytest
import tensorflow as tf

from keras_saat.config import ExperimentConfig
from keras_saat.data import read_karpathy
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.data.feature_cache.shard_checks import check_framing, naming_damaged_shards
from keras_saat.encoders import ImageEncoder
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.scoring import caption_split
from tests.helpers import run_capped_cases, small_model
from tests.support.crafted_settings import read_cache_split, write_damaged_cache
from tests.support.synthetic_data import write_synthetic_cache

WHAT_TO_DO = "delete that file and run `keras-saat extract-features` again"


def damaged(shard):
    return f"the feature cache shard {shard} is damaged ("


def test_a_whole_cache_passes_the_framing_check_and_reads(tmp_path):
    write_synthetic_cache(tmp_path, 24, {"locations": 4, "channels": 8}, shard_size=8)
    for shard in sorted(tmp_path.glob("*.tfrecord")):
        check_framing(shard)
    assert read_cache_split(tmp_path) == 24


def test_a_truncated_shard_is_named_when_the_cache_is_opened(tmp_path):
    shard = write_damaged_cache(tmp_path, "truncate")
    with pytest.raises(KerasSaatError) as caught:
        FeatureCache(tmp_path).files("train")
    message = str(caught.value)
    assert message.startswith(damaged(shard)) and WHAT_TO_DO in message
    assert "record 8 runs 10 bytes past the file's end" in message and "\n" not in message
    with pytest.raises(KerasSaatError, match="train-00001-of-00003.tfrecord is damaged"):
        FeatureCache(tmp_path).evaluation_batches("train", records=None, batch_size=4)


def test_a_damaged_shard_names_the_workdir_that_owns_the_cache(tmp_path):
    """A run reading another workdir's cache (`data.feature_cache`) is told where to
    extract again: its own `extract-features` would not touch that cache."""
    owner = tmp_path / "owner"
    shard = write_damaged_cache(owner / "features", "truncate")
    with pytest.raises(KerasSaatError) as caught:
        FeatureCache(owner / "features").files("train")
    message = str(caught.value)
    assert message.startswith(damaged(shard)) and WHAT_TO_DO in message
    assert f"again for the workdir that owns the cache, {owner}, which" in message
    elsewhere = write_damaged_cache(tmp_path / "cache", "truncate")  # not a workdir's
    with pytest.raises(KerasSaatError) as caught:
        FeatureCache(tmp_path / "cache").files("train")
    assert str(caught.value).startswith(damaged(elsewhere)) and "owns" not in str(caught.value)


def test_a_shard_cut_at_a_record_boundary_is_named_by_the_size_it_was_written(tmp_path):
    write_synthetic_cache(tmp_path, 24, {"locations": 4, "channels": 8}, shard_size=8)
    index = json.loads((tmp_path / "index.json").read_text())
    for shard in index["splits"]["train"]["shards"]:  # as extraction records them
        shard["bytes"] = (tmp_path / shard["file"]).stat().st_size
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert len(FeatureCache(tmp_path).files("train")) == 3  # a stat a shard, all whole
    shard = tmp_path / "train-00001-of-00003.tfrecord"
    whole = shard.read_bytes()
    record = 12 + int.from_bytes(whole[:8], "little") + 4  # a record: all are one size here
    shard.write_bytes(whole[: len(whole) - record])  # its framing still ends at its end
    check_framing(shard)
    with pytest.raises(KerasSaatError) as caught:
        FeatureCache(tmp_path).files("train")
    message = str(caught.value)
    assert message.startswith(damaged(shard)) and WHAT_TO_DO in message
    assert f"({len(whole) - record} bytes, where {len(whole)} were written)" in message


def test_a_missing_shard_is_named(tmp_path):
    write_synthetic_cache(tmp_path, 24, {"locations": 4, "channels": 8}, shard_size=8)
    (tmp_path / "train-00002-of-00003.tfrecord").unlink()
    with pytest.raises(
        KerasSaatError, match="train-00002-of-00003.tfrecord is damaged .the file is missing"
    ):
        FeatureCache(tmp_path).files("train")


def test_a_flipped_bit_is_named_when_the_split_is_streamed(tmp_path):
    shard = write_damaged_cache(tmp_path, "flip")
    with pytest.raises(KerasSaatError) as caught:
        read_cache_split(tmp_path)
    message = str(caught.value)
    assert message.startswith(damaged(shard)) and WHAT_TO_DO in message
    assert "a record's checksum does not match, at byte 12" in message and "\n" not in message


def test_a_flipped_bit_is_named_in_evaluation_batches(tmp_path):
    shard = write_damaged_cache(tmp_path, "flip")
    cache = FeatureCache(tmp_path)
    with pytest.raises(KerasSaatError, match=re.escape(damaged(shard))):
        with naming_damaged_shards(cache.shard_files(("train",))):
            for _ in cache.evaluation_batches("train", records=None, batch_size=4):
                pass


def test_a_flipped_bit_is_named_when_the_features_go_resident(tmp_path):
    shard = write_damaged_cache(tmp_path, "flip")
    with pytest.raises(KerasSaatError, match=re.escape(damaged(shard))):
        ResidentFeatures(FeatureCache(tmp_path), "train", tf.float16)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_shard_is_named_when_a_split_is_captioned(tmp_path, damage):
    model, _ = small_model()
    encoder = model.encoder
    shard = write_damaged_cache(tmp_path, damage, encoder.num_locations, encoder.feature_channels)
    with pytest.raises(KerasSaatError, match=re.escape(damaged(shard))):
        caption_split(model, FeatureCache(tmp_path), "train", [], ExperimentConfig(), batch_size=8)


@pytest.mark.slow
def test_a_deleted_shard_is_extracted_again(shapes_dir, tmp_path):
    shutil.copytree(shapes_dir, tmp_path / "shapes")
    dataset = read_karpathy(tmp_path / "shapes" / "dataset_shapes.json")
    tf.keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn")
    quiet = lambda _: None  # noqa: E731
    cache, _ = extract_features(
        encoder, dataset, tmp_path / "c", splits=("train",), shard_size=16, log=quiet
    )
    expected = cache.load("train")[1]
    (tmp_path / "c" / "train-00001-of-00003.tfrecord").unlink()
    lines = []
    cache, _ = extract_features(
        encoder, dataset, tmp_path / "c", splits=("train",), shard_size=16, log=lines.append
    )
    assert any("2/3 shards already done, extracting the other 1" in line for line in lines)
    assert (cache.load("train")[1] == expected).all()
    index = json.loads((tmp_path / "c" / "index.json").read_text())
    assert [s["written"] for s in index["splits"]["train"]["shards"]] == [16, 16, 8]


def test_a_zlib_record_that_inflates_past_its_shape_is_refused_inside_a_memory_cap():
    """A zlib cache record of 1 MiB that inflates to 1 GiB: read in a child capped 768 MiB
    above its imports, it is refused by name after inflating 65 bytes; an unbounded
    inflate would need the whole GiB."""
    warm = (
        "import tensorflow as tf, keras_saat.data.feature_cache.feature_cache; "
        "list(tf.data.Dataset.range(4).map(lambda x: x + 1, num_parallel_calls=2))"
    )
    status, answers, stderr = run_capped_cases(
        ["cache_zlib_record_1gb"], warm=warm, headroom_mb=768, timeout=300
    )
    answer = answers.get("cache_zlib_record_1gb")
    assert answer is not None, f"the reader died or ran out of time ({status}): {stderr}"
    assert answer.startswith("the feature cache holds a record that is not the 64 bytes"), answer
    assert "delete the cache folder and run `keras-saat extract-features` again" in answer


@pytest.mark.parametrize("inflated", [63, 65, 64 * 1000])
def test_zlib_records_of_the_wrong_length_are_named_on_each_path(tmp_path, inflated):
    import zlib

    from tests.support.synthetic_data import write_synthetic_cache

    write_synthetic_cache(tmp_path, 8, {"locations": 4, "channels": 8}, compression="zlib")
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    example = tf.train.Example.FromString(records[3])
    example.features.feature["features"].bytes_list.value[0] = zlib.compress(bytes(inflated))
    records[3] = example.SerializeToString()
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in records:
            writer.write(record)
    cache = FeatureCache(tmp_path)
    with pytest.raises(KerasSaatError, match="holds a record that is not the 64 bytes"):
        read_cache_split(tmp_path)
    with pytest.raises(KerasSaatError) as caught:  # the resident path reads shard by shard
        list(cache.read_shard(str(shard)))
    assert str(caught.value).startswith(damaged(shard))
    assert "a record does not hold the 64 bytes of one image's features" in str(caught.value)
