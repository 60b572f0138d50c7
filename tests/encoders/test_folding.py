"""Folding batch norms and zero padding into convolutions, and the chunked inference forward."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat.encoders import ImageEncoder, register_backbone
from keras_saat.encoders.folding import fold_batch_norms
from keras_saat.encoders.registry import BackboneSpec
from keras_saat.errors import KerasSaatError


def randomise_batch_norms(model, seed=0):
    """Moving statistics and affine parameters far from the identity, so folding matters."""
    rng = np.random.default_rng(seed)
    draws = {
        "gamma": lambda n: rng.uniform(0.3, 3.0, n),
        "beta": lambda n: rng.normal(0.0, 1.0, n),
        "moving_mean": lambda n: rng.normal(0.0, 1.0, n),
        "moving_variance": lambda n: rng.uniform(0.2, 4.0, n),
    }
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for weight in layer.weights:
                weight.assign(draws[weight.path.split("/")[-1]](weight.shape))


def batch_norm_reference(x, norm):
    """NumPy: the inference batch norm, gamma (x - mean) / sqrt(var + eps) + beta."""
    weights = {w.path.split("/")[-1]: np.asarray(w) for w in norm.weights}
    gamma = weights.get("gamma", 1.0)
    beta = weights.get("beta", 0.0)
    return (
        gamma * (x - weights["moving_mean"]) / np.sqrt(weights["moving_variance"] + norm.epsilon)
        + beta
    )


def tiny_backbone(input_shape=(16, 16, 3)):
    """Every case: foldable pairs (plain, depthwise, no scale, no centre), pads that fold and
    pads that do not, and normalisations that must stay."""
    inputs = keras.Input(input_shape)
    x = keras.layers.ZeroPadding2D(((0, 1), (0, 1)), name="pad_same")(inputs)  # = "same" at 16, s2
    x = keras.layers.Conv2D(8, 3, strides=2, use_bias=False, name="conv_a")(x)
    x = keras.layers.BatchNormalization(name="bn_a")(x)
    x = keras.layers.Activation("swish")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, name="dw_b")(x)
    x = keras.layers.BatchNormalization(scale=False, name="bn_b")(x)
    x = keras.layers.ZeroPadding2D(((1, 1), (1, 1)), name="pad_other")(x)  # "same" would be (0, 1)
    x = keras.layers.DepthwiseConv2D(3, strides=2, name="dw_c")(x)
    x = keras.layers.BatchNormalization(center=False, name="bn_c")(x)
    branch = keras.layers.Conv2D(16, 1, name="conv_shared_out")(x)  # feeds a BN and an Add
    y = keras.layers.BatchNormalization(name="bn_kept")(branch)
    y = keras.layers.Add()([y, branch])
    y = keras.layers.Conv2D(16, 1, activation="relu", name="conv_relu")(y)  # activation first
    y = keras.layers.BatchNormalization(name="bn_after_relu")(y)
    return keras.Model(inputs, y, name="tiny")


def test_folded_copy_computes_the_same_and_drops_only_what_folds():
    model = tiny_backbone()
    randomise_batch_norms(model)
    folded, count = fold_batch_norms(model)
    x = np.random.default_rng(1).normal(0, 2, (4, 16, 16, 3)).astype("float32")
    expected = model(x, training=False).numpy()
    np.testing.assert_allclose(folded(x, training=False).numpy(), expected, rtol=1e-4, atol=1e-4)
    kinds = {layer.name: type(layer).__name__ for layer in folded.layers}
    for gone in ("bn_a", "bn_b", "bn_c", "pad_same"):
        assert kinds[gone] == "FoldedAway", gone
    for kept in ("bn_kept", "bn_after_relu"):
        assert kinds[kept] == "BatchNormalization", kept
    assert kinds["pad_other"] == "ZeroPadding2D"
    assert (
        folded.get_layer("conv_a").padding == "same" and folded.get_layer("dw_c").padding == "valid"
    )
    assert count == 4
    # The original is untouched.
    assert type(model.get_layer("bn_a")).__name__ == "BatchNormalization"
    np.testing.assert_array_equal(model(x, training=False).numpy(), expected)


def test_folded_weights_match_a_numpy_batch_norm():
    inputs = keras.Input((6, 6, 2))
    conv = keras.layers.Conv2D(3, 3, padding="same", name="conv")
    norm = keras.layers.BatchNormalization(epsilon=1e-3, name="bn")
    model = keras.Model(inputs, norm(conv(inputs)))
    randomise_batch_norms(model, seed=3)
    x = np.random.default_rng(2).normal(size=(2, 6, 6, 2)).astype("float32")
    reference = batch_norm_reference(conv(x).numpy().astype(np.float64), norm)
    folded, count = fold_batch_norms(model)
    assert count == 1
    np.testing.assert_allclose(folded(x).numpy(), reference, rtol=1e-5, atol=1e-5)
    kernel, bias = folded.get_layer("conv").get_weights()
    assert kernel.shape == (3, 3, 2, 3) and bias.shape == (3,)


def test_nothing_to_fold_returns_the_model_itself():
    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(4, 3, activation="relu")(inputs))
    assert fold_batch_norms(model) == (model, 0)


def test_efficientnet_encoder_folds_every_batch_norm_and_pad():
    # Seeded: with the randomised batch norms, 50 layers reach activations of 1e8, and
    # some random initialisations amplify float rounding past the tolerance (a test
    # that ran after others' seeds failed with 1e-2).
    keras.utils.set_random_seed(0)
    encoder = ImageEncoder("efficientnetb0", 96)
    randomise_batch_norms(encoder.feature_model)
    folded, count = encoder.folded()
    kinds = [type(layer).__name__ for layer in folded.feature_model.layers]
    assert "BatchNormalization" not in kinds and "ZeroPadding2D" not in kinds
    assert count == 49 + 5
    assert folded.grid_shape == encoder.grid_shape and folded.preprocessing == encoder.preprocessing
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 96, 96, 3)).astype("float32")
    expected = encoder.infer(pixels, 0).numpy()
    got = folded.infer(pixels, 0).numpy()
    assert np.max(np.abs(got - expected)) <= 1e-4 * np.max(np.abs(expected))


@pytest.mark.parametrize("chunk_size", [1, 2, 3])
def test_chunked_inference_equals_one_call_for_every_batch_size(chunk_size):
    encoder = ImageEncoder("shapes_cnn")
    pixels = np.random.default_rng(0).uniform(0, 255, (7, 128, 128, 3)).astype("float32")
    whole = encoder.infer(pixels, 0).numpy()
    np.testing.assert_array_equal(whole, encoder(pixels).numpy())
    signature = [tf.TensorSpec([None, 128, 128, 3], tf.float32)]
    chunked = tf.function(lambda p: encoder.infer(p, chunk_size), input_signature=signature)
    for batch in (0, 1, 2, 3, 5, 7):
        got = chunked(pixels[:batch]).numpy()
        assert got.shape == (batch, 64, 128)
        np.testing.assert_allclose(got, whole[:batch], rtol=1e-5, atol=1e-6)


def test_chunked_inference_rejects_bad_settings():
    encoder = ImageEncoder("shapes_cnn")
    pixels = np.zeros((2, 128, 128, 3), np.float32)
    with pytest.raises(ValueError, match="chunk_size must be >= 0"):
        encoder.infer(pixels, -1)
    with pytest.raises(ValueError, match="parallel >= 1"):
        encoder.infer(pixels, 2, parallel=0)


@pytest.mark.slow
def test_export_folds_the_backbone_and_serves_the_same_captions(tmp_path):
    """A backbone with batch norms and padding, exported folded and chunked, captions as
    `generate` does; keras_saat.json records both settings."""
    from keras_saat.config import DecodeConfig, ExportConfig
    from keras_saat.export import export_model
    from keras_saat.models.captioner import Captioner

    register_backbone(
        BackboneSpec(
            "tiny_bn_test",
            lambda shape, weights: tiny_backbone(shape),
            "bn_after_relu",
            "unit",
            16,
            False,
        )
    )
    words = ["<pad>", "<unk>", "<start>", "<end>", "a", "red", "blue", "circle", "square"]
    model = Captioner(
        words,
        backbone="tiny_bn_test",
        feature_dim=8,
        embedding_dim=8,
        lstm_units=16,
        attention_units=8,
        max_length=5,
        seed=0,
    )
    randomise_batch_norms(model.encoder.feature_model)
    pixels = np.random.default_rng(0).uniform(0, 255, (5, 16, 16, 3)).astype("float32")
    expected = model.generate(pixels, beam_size=2, return_details=True)
    logs = []
    path = export_model(
        model,
        tmp_path,
        DecodeConfig(beam_size=2, max_length=5),
        ExportConfig(encoder_chunk=2, warmup=False),
        log=logs.append,
    )
    assert any("folded 4 batch norms and zero paddings" in line for line in logs), logs
    info = json.loads((path / "assets.extra" / "keras_saat.json").read_text())
    assert info["encoder_chunk"] == 2 and info["fold_batch_norms"] is True
    served = tf.saved_model.load(str(path)).signatures["serving_pixels"](pixels=tf.constant(pixels))
    captions = [c.decode() for c in served["caption"].numpy()]
    assert captions == [e["caption"] for e in expected]
    np.testing.assert_allclose(
        served["log_prob"].numpy(), [e["log_prob"] for e in expected], rtol=1e-4, atol=1e-4
    )


def test_export_refuses_a_negative_chunk(tmp_path):
    from keras_saat.config import ExportConfig
    from keras_saat.export import export_model
    from keras_saat.models.captioner import Captioner

    model = Captioner(
        ["<pad>", "<unk>", "<start>", "<end>", "a"],
        feature_dim=8,
        embedding_dim=8,
        lstm_units=8,
        attention_units=8,
    )
    with pytest.raises(KerasSaatError, match="encoder_chunk must be 0"):
        export_model(model, tmp_path, export=ExportConfig(encoder_chunk=-2))
