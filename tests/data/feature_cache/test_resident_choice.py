"""`data.resident_features`: the features on the device when they fit the budget, else streamed."""

import keras
import pytest
import tensorflow as tf

from keras_saat import Captioner
from keras_saat.config import from_dict
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.resident_choice import resident_features
from keras_saat.data.feature_cache.resident_features import ResidentFeatures
from keras_saat.data.pipeline.image_file_source import ImageFiles
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.epoch_batches import batching_mode
from keras_saat.runtime.memory import device_memory
from keras_saat.runtime.precision import dtype_policy
from tests.support.synthetic_data import write_synthetic_cache


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("choice") / "cache"
    write_synthetic_cache(folder, 10, {"locations": 16, "channels": 8})
    return FeatureCache(folder)


def choose(source, precision="float32", **data):
    with dtype_policy(precision):
        keras.utils.set_random_seed(0)
        model = Captioner(["<pad>", "<unk>", "<start>", "<end>", "a"], feature_dim=8,
                          embedding_dim=4, lstm_units=8, attention_units=4)  # fmt: skip
    lines = []
    data = from_dict({"data": data}).data
    strategy = tf.distribute.get_strategy()
    chosen = resident_features(data, source, model.compute_dtype, strategy, lines.append)
    return chosen, lines


def test_auto_holds_the_features_when_they_fit(cache):
    chosen, lines = choose(cache)
    assert chosen is not None and chosen.table.shape == (10, 16, 8)
    assert chosen.table.dtype == tf.float16  # the cache's dtype: float32 compute casts it
    assert lines[0].startswith("features resident on ") and "10 images x 16x8 float16" in lines[0]


def test_bfloat16_training_holds_bfloat16_rows(cache):
    chosen, _ = choose(cache, "bfloat16")
    assert chosen.table.dtype == tf.bfloat16


def test_auto_streams_what_does_not_fit_and_true_refuses_it(cache):
    chosen, lines = choose(cache, resident_budget=1e-12)
    assert chosen is None and lines[0].startswith("features streamed from the cache")
    with pytest.raises(KerasSaatError, match="raise data.resident_budget"):
        choose(cache, resident_features=True, resident_budget=1e-12)


def test_false_streams(cache):
    assert choose(cache, resident_features=False) == (None, [])


def test_a_training_backbone_has_no_cache_to_hold(cache):
    assert choose(ImageFiles(128)) == (None, [])
    with pytest.raises(KerasSaatError, match="the backbone trains"):
        choose(ImageFiles(128), resident_features=True)


@pytest.mark.parametrize("budget", [0.0, 1.5])
def test_the_budget_is_a_share(cache, budget):
    with pytest.raises(
        KerasSaatError, match=r"resident_budget: .* out of range; give a number over 0.0 up to 1.0"
    ):
        choose(cache, resident_budget=budget)


def test_the_budget_is_a_share_of_the_free_memory(cache):
    device, total, free = device_memory()
    assert device == "CPU" and 0 < free <= total
    share = 0.5 * cache.count("train") * 16 * 8 * 2 / free  # the split (float16) is 2x it
    chosen, lines = choose(cache, resident_budget=share)
    assert chosen is None and "GiB free of" in lines[0]
    assert choose(cache, resident_budget=4 * share)[0] is not None


def test_auto_batching_goes_per_image_where_the_features_stream(cache):
    def mode(resident, **data):
        return batching_mode(from_dict({"data": data}).data, resident or cache)

    resident = ResidentFeatures(cache)
    assert mode(None) == "per_image" and mode(resident) == "per_caption"
    assert mode(None, bucket_by_length=True) == "per_caption"  # buckets are per caption
    assert mode(None, batching="per_caption") == "per_caption"
    assert mode(resident, batching="per_image") == "per_image"
    assert (
        batching_mode(from_dict({}).data, ImageFiles(128)) == "per_caption"
    )  # a training backbone
