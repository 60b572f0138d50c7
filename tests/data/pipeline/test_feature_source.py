"""The three feature sources answer the one protocol the pipeline, training and scoring ask."""

import inspect

import pytest

from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.feature_source import FeatureSource
from keras_saat.data.pipeline.image_file_source import ImageFiles
from tests.support.synthetic_data import write_synthetic_cache

METHODS = [
    name
    for name, value in vars(FeatureSource).items()
    if inspect.isfunction(value) and not name.startswith("_")
]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sources") / "cache"
    records = write_synthetic_cache(folder, 10, {"locations": 4, "channels": 8}, shard_size=4)
    cache = FeatureCache(folder)
    return records, {"images": ImageFiles(32), "cache": cache, "resident": ResidentFeatures(cache)}


def test_each_source_answers_every_method_with_the_protocols_arguments(sources):
    _, found = sources
    assert set(METHODS) == {
        "shard_positions", "planned_batches", "evaluation_batches", "skipped", "shard_files"
    }  # fmt: skip
    for source in found.values():
        for name in METHODS:
            wanted = inspect.signature(getattr(FeatureSource, name)).parameters
            given = inspect.signature(getattr(source, name)).parameters
            assert list(given) == list(wanted)[1:], (type(source).__name__, name)
        assert isinstance(source.streams, bool)


def test_what_each_source_says_about_its_cache_and_shards(sources):
    records, found = sources
    cache = found["cache"]
    assert found["images"].cache is None and found["images"].shard_files(["train"]) == []
    assert cache.cache is cache and found["resident"].cache is cache
    assert found["resident"].shard_files(["train"]) == cache.shard_files(["train", "val"])
    assert [len(p) for p in cache.shard_positions("train")] == [4, 4, 2]
    assert [len(p) for p in found["images"].shard_positions("train", records)] == [10]
    assert (cache.streams, found["resident"].streams, found["images"].streams) == (
        True,
        False,
        False,
    )


def test_a_plan_is_frozen_and_per_image_groups_are_not_bucketed():
    plan = BatchPlan(8, seed=1)
    with pytest.raises(AttributeError):
        plan.seed = 2  # type: ignore[misc]
    assert plan.float_images and not BatchPlan(4, per_image=5).float_images
    with pytest.raises(ValueError, match="not bucketed"):
        BatchPlan(4, per_image=5, bucket_by_length=True)
