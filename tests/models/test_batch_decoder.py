"""BatchDecoder: one compiled shape a run, the short last batch padded and its padding dropped."""

import numpy as np
import pytest

from keras_saat.config import DecodeConfig
from keras_saat.errors import KerasSaatError
from keras_saat.models.batch_decoder import BatchDecoder
from tests.helpers import small_model


def decode_function(model, beam_size):
    return model._decode_fns[(model.max_length, beam_size, 0.0, model.decode_jit_compile)]


@pytest.mark.parametrize("beam_size", [1, 2])
def test_a_run_traces_once_and_drops_the_padded_rows(beam_size):
    """5 feature rows in batches of 2: the last batch of 1 runs padded to 2, and every
    caption is the one each row gets decoded on its own."""
    model, _ = small_model(max_length=5)
    features = np.random.default_rng(0).normal(size=(5, 64, 128)).astype("float32")
    batched = model.generate(
        features=features, batch_size=2, beam_size=beam_size, return_details=True
    )
    decode = decode_function(model, beam_size)
    assert decode.experimental_get_tracing_count() == 1
    (signature,) = decode._list_all_concrete_functions()
    assert signature.structured_input_signature[0][0].shape == (2, 64, 128)
    assert len(batched) == 5
    for row, result in zip(features, batched, strict=True):
        (alone,) = model.generate(features=row[None], beam_size=beam_size, return_details=True)
        assert result["words"] == alone["words"]
        np.testing.assert_allclose(result["log_prob"], alone["log_prob"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result["attention"], alone["attention"], atol=1e-5)


def test_pixels_reach_the_encoder_at_one_shape_too():
    model, _ = small_model(max_length=4)
    pixels = np.random.default_rng(1).uniform(0, 255, (3, 128, 128, 3)).astype("float32")
    decoder = BatchDecoder(model, batch_size=2, beam_size=1)
    results = decoder(pixels=pixels)
    assert len(results) == 3 and decoder.width == 2
    assert model.encoder.compiled().experimental_get_tracing_count() == 1
    assert decode_function(model, 1).experimental_get_tracing_count() == 1
    (last,) = BatchDecoder(model, batch_size=2, beam_size=1)(pixels=pixels[2:])
    assert last["words"] == results[2]["words"]


def test_a_batch_wider_than_the_first_runs_at_its_own_width():
    """A stream's first batch may be cut short (by its byte budget); a fuller one after it
    is decoded whole, each row as it is alone."""
    model, _ = small_model(max_length=4)
    features = np.random.default_rng(2).normal(size=(4, 64, 128)).astype("float32")
    decoder = BatchDecoder(model, batch_size=4, beam_size=1)
    first = decoder.decode_batch(features[:1], encode=False)
    fuller = decoder.decode_batch(features, encode=False)
    assert decoder.width == 1 and len(fuller) == 4
    assert fuller[0]["words"] == first[0]["words"]
    (alone,) = model.generate(features=features[3:], beam_size=1, return_details=True)
    assert fuller[3]["words"] == alone["words"]


def test_the_batch_size_defaults_to_decode_batch_size_and_is_checked():
    model, _ = small_model()
    assert BatchDecoder(model).batch_size == DecodeConfig.batch_size
    assert BatchDecoder(model).beam_size == model.beam_size
    with pytest.raises(KerasSaatError, match="batch_size must be at least 1"):
        BatchDecoder(model, batch_size=0)
    with pytest.raises(KerasSaatError, match="exactly one of"):
        BatchDecoder(model)()
