from pathlib import Path

import pytest

from keras_saat.config import ExperimentConfig, from_dict, load_config, save_config, to_dict
from keras_saat.config_choices import CHOICES
from keras_saat.config_files import parse_override, recipe_names, recipe_path
from keras_saat.errors import KerasSaatError

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml")) + [
    recipe_path(name) for name in recipe_names()
]


def test_yaml_file_and_overrides_apply_in_order(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nmodel:\n  attention: hard\n  feature_dim: 32\ntrain:\n  epochs: 3\n")
    config = load_config(
        path, ["train.epochs=5", "model.dropout=0.25", "model.backbone_weights=null"]
    )
    assert (
        config.name == "x" and config.model.attention == "hard" and config.model.feature_dim == 32
    )
    assert config.train.epochs == 5 and config.model.dropout == 0.25
    assert config.model.backbone_weights is None
    assert config.data == ExperimentConfig().data


def test_saved_config_loads_back_identically(tmp_path):
    config = from_dict({"model": {"attention": "hard"}, "train": {"learning_rate": 3e-4}})
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config
    assert to_dict(config)["model"]["attention"] == "hard"


def test_jit_compile_is_true_false_or_auto_and_round_trips(tmp_path):
    assert ExperimentConfig().train.jit_compile == "auto"
    for text, value in (("true", True), ("false", False), ("auto", "auto")):
        config = load_config(None, [f"train.jit_compile={text}"])
        assert config.train.jit_compile == value and type(config.train.jit_compile) is type(value)
        save_config(config, tmp_path / "config.yaml")
        assert load_config(tmp_path / "config.yaml") == config


def test_unknown_key_names_the_key_and_the_nearest_valid_one():
    with pytest.raises(
        KerasSaatError, match=r"unknown config key 'model.atention'.*did you mean \"attention\""
    ):
        from_dict({"model": {"atention": "soft"}})
    with pytest.raises(KerasSaatError, match=r"unknown config section 'trian'.*\"train\""):
        from_dict({"trian": {}})


def test_wrong_types_and_choices_are_errors():
    with pytest.raises(KerasSaatError, match="train.epochs.*not a valid int"):
        from_dict({"train": {"epochs": "many"}})
    with pytest.raises(
        KerasSaatError, match="train.jit_compile: 1 is not one of true, false, auto"
    ):
        from_dict({"train": {"jit_compile": 1}})
    with pytest.raises(KerasSaatError, match=r"'Auto' is not one of .*did you mean \"auto\""):
        from_dict({"train": {"jit_compile": "Auto"}})
    with pytest.raises(KerasSaatError, match="train.jit_compile: null is not allowed"):
        from_dict({"train": {"jit_compile": None}})
    with pytest.raises(KerasSaatError, match="model.attention.*not one of soft, hard"):
        from_dict({"model": {"attention": "sofft"}})
    with pytest.raises(KerasSaatError, match="expected section.key=value"):
        parse_override("train.epochs")
    with pytest.raises(
        KerasSaatError, match="data.cache_compression: 'gzip' is not one of none, zlib"
    ):
        from_dict({"data": {"cache_compression": "gzip"}})
    data = from_dict({"data": {"cache_dtype": "int8", "cache_compression": "zlib"}}).data
    assert (data.cache_dtype, data.cache_compression) == ("int8", "zlib")


def test_config_file_errors_name_the_file(tmp_path):
    with pytest.raises(KerasSaatError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(KerasSaatError, match="bad.yaml is not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load(path):
    assert isinstance(load_config(path), ExperimentConfig)


def test_configs_are_shipped():
    assert CONFIGS, "configs/*.yaml missing"
    assert {"shapes_soft", "shapes_hard"} <= set(recipe_names())


def test_a_recipe_name_loads_as_its_file():
    assert load_config("shapes_hard") == load_config(recipe_path("shapes_hard"))
    assert load_config("shapes_hard").model.attention == "hard"
    with pytest.raises(KerasSaatError, match="no recipe 'shapes_sfot' \\(did you mean"):
        load_config("shapes_sfot")


def test_choices_agree_with_the_constants_their_owners_define():
    """config_choices repeats these to stay importable without TensorFlow."""
    from keras_saat.data.feature_cache.cache_format import COMPRESSIONS, DTYPES
    from keras_saat.export.litert import QUANTIZE_MODES
    from keras_saat.images.decoding import RESIZE_MODES

    assert CHOICES["data", "resize"] == RESIZE_MODES
    assert CHOICES["export", "resize"] == ("", *RESIZE_MODES)
    assert CHOICES["data", "cache_dtype"] == tuple(DTYPES)
    assert CHOICES["data", "cache_compression"] == COMPRESSIONS
    assert CHOICES["export", "quantize"] == QUANTIZE_MODES
