"""`location_embedding`: one learned vector a grid location, added to the annotations
a_i = relu(W f_i + b) + e_i, learned with the decoder and kept by every save."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat import load_captioner
from keras_saat.errors import KerasSaatError
from tests.helpers import small_model


def with_locations(seed=1):
    model, vocab = small_model(location_embedding=True, seed=seed)
    rng = np.random.default_rng(seed)
    model.locations.assign(rng.normal(0, 0.5, model.locations.shape).astype("float32"))
    return model, vocab


def test_annotations_are_the_squeeze_plus_each_locations_vector():
    model, _ = with_locations()
    grid_h, grid_w = model.grid_shape
    assert tuple(model.locations.shape) == (grid_h * grid_w, 16)
    features = np.random.default_rng(2).normal(
        size=(3, grid_h * grid_w, model.encoder.feature_channels)
    )
    kernel, bias = (np.asarray(w) for w in model.squeeze.weights)
    want = np.maximum(features @ kernel + bias, 0) + np.asarray(model.locations)[None]
    got = np.asarray(model.annotate(tf.constant(features, tf.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    plain, _ = small_model()
    assert plain.locations is None and len(plain.weights) == len(model.weights) - 1


def test_the_vectors_learn_and_survive_saving(tmp_path):
    model, vocab = small_model(location_embedding=True)
    rng = np.random.default_rng(0)
    grid = model.grid_shape[0] * model.grid_shape[1]
    features = rng.normal(size=(8, grid, model.encoder.feature_channels)).astype("float32")
    tokens = vocab.encode_batch(
        ["a red circle at the top"] * 4 + ["a blue square on the right"] * 4, 8
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.fit({"features": features, "tokens": tokens}, batch_size=8, epochs=3, verbose=0)
    learned = np.asarray(model.locations)
    assert np.abs(learned).max() > 1e-3  # from zeros: the gradient reaches them
    model.save(tmp_path / "model.keras")
    again = load_captioner(tmp_path / "model.keras")
    np.testing.assert_array_equal(np.asarray(again.locations), learned)
    preset = load_captioner(model.save_to_preset(tmp_path / "preset"))
    np.testing.assert_array_equal(np.asarray(preset.locations), learned)
    pixels = rng.uniform(0, 255, (2, 128, 128, 3)).astype("float32")
    assert preset.generate(pixels, beam_size=2) == model.generate(pixels, beam_size=2)


def test_a_location_embedding_that_is_not_a_bool_is_refused():
    with pytest.raises(KerasSaatError, match="location_embedding is true or false"):
        small_model(location_embedding="yes")
