"""LiteRT export: builtin ops only, run by the ai-edge-litert interpreter, against the model."""

import json

import numpy as np
import pytest
import yaml

from keras_saat import load_captioner
from keras_saat.cli import main
from keras_saat.data import read_karpathy
from keras_saat.errors import KerasSaatError
from keras_saat.layers.feature_familiarity import DEFAULT_QUANTILE
from keras_saat.text.vocabulary import END_ID, PAD_ID

pytestmark = pytest.mark.slow
pytest.importorskip(
    "ai_edge_litert", reason="ai-edge-litert is not installed: pip install -e '.[test]'"
)
from keras_saat.export.litert import run_litert  # noqa: E402


@pytest.fixture(scope="module")
def exported(trained_workdir, tmp_path_factory):
    """The trained model as greedy .tflite files: float32, float16 and int8 weights."""
    out = tmp_path_factory.mktemp("litert")
    files = {}
    for quantize in ("none", "float16", "int8"):
        folder = out / quantize
        argv = ["export", "--workdir", trained_workdir, "--out", folder, "--format", "litert"]
        argv += ["--beam-size", "1", "--quantize", quantize, "--name", "cap"]
        assert main([str(a) for a in argv]) == 0
        files[quantize] = folder / "cap.tflite"
    return files


@pytest.fixture(scope="module")
def scenes(trained_workdir):
    """Pixels of every image of the small Shapes dataset (56), as the model's rule resizes them."""
    config = yaml.safe_load((trained_workdir / "config.yaml").read_text())
    records = read_karpathy(config["data"]["path"]).records
    model = load_captioner(trained_workdir)
    return model, model.preprocessor()([r.path for r in records])


def test_the_files_an_app_needs(exported, trained_workdir):
    folder = exported["none"].parent
    model = load_captioner(trained_workdir)
    assert (folder / "vocab.txt").read_text().splitlines() == list(model.vocabulary.words)
    info = json.loads((folder / "cap.json").read_text())
    assert info["input"]["pixels"] == [1, model.image_size, model.image_size, 3]
    assert info["resize"] == model.resize and info["beam_size"] == 1 and info["grid"] == [8, 8]
    assert info["familiarity"]["calibrated"] and info["familiarity"]["quantile"] == DEFAULT_QUANTILE
    sizes = {q: path.stat().st_size for q, path in exported.items()}
    assert sizes["float16"] < 0.6 * sizes["none"] and sizes["int8"] < 0.35 * sizes["none"]


def test_float32_tokens_equal_the_models_greedy_tokens(exported, scenes):
    model, pixels = scenes
    got = run_litert(exported["none"], pixels)
    model.decode_jit_compile = False
    want = model.decode(model.encoder.compiled()(pixels), beam_size=1)
    tokens = want["tokens"].numpy()
    assert got["tokens"].shape == tokens.shape and got["tokens"].dtype == np.int32
    np.testing.assert_array_equal(got["tokens"], tokens)
    np.testing.assert_allclose(got["log_prob"], want["log_prob"].numpy(), rtol=1e-4, atol=1e-4)
    novelty = want["novelty"].numpy()  # the training run calibrated it
    assert np.isfinite(novelty).all() and got["novelty"].dtype == np.float32
    np.testing.assert_allclose(got["novelty"], novelty, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got["familiar"], novelty <= 1.0)
    lengths = (got["tokens"] != PAD_ID).sum(axis=1)
    assert ((got["tokens"] == END_ID).sum(axis=1) <= 1).all()
    for row, steps in enumerate(lengths):
        attention = got["attention"][row]
        np.testing.assert_allclose(attention[:steps].sum(axis=(1, 2)), 1.0, atol=1e-4)
        assert not attention[steps:].any()


def test_quantized_files_agree_with_the_float32_file(exported, scenes):
    _, pixels = scenes
    reference = run_litert(exported["none"], pixels)["tokens"]
    for quantize, share in (("float16", 0.95), ("int8", 0.90)):
        tokens = run_litert(exported[quantize], pixels)["tokens"]
        same = (tokens == reference).all(axis=1).mean()
        assert same >= share, (quantize, same)


def test_beam_search_converts_too(trained_workdir, scenes, tmp_path):
    model, pixels = scenes
    argv = ["export", "--workdir", trained_workdir, "--out", tmp_path, "--format", "litert"]
    assert main([str(a) for a in argv + ["--beam-size", "3", "--name", "beam"]]) == 0
    got = run_litert(tmp_path / "beam.tflite", pixels[:8])
    model.decode_jit_compile = False
    want = model.decode(model.encoder.compiled()(pixels[:8]), beam_size=3)
    np.testing.assert_array_equal(got["tokens"], want["tokens"].numpy())


def test_a_tf_op_outside_litert_is_named():
    import tensorflow as tf

    from keras_saat.export.litert import convert

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="pixels")])
    def needs_tf_ops(pixels):
        text = tf.strings.as_string(pixels)  # string ops are not LiteRT builtins
        return {"out": tf.strings.length(text)}

    with pytest.raises(KerasSaatError, match="AsString"):
        convert(needs_tf_ops)
