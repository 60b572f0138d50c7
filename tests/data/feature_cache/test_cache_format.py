"""The feature cache's int8 format: the quantisation against a NumPy reference, records
parsed back, sizes on disk, and a cache of another format refused."""

import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from keras_saat.data import read_karpathy
from keras_saat.data.feature_cache.cache_format import (
    RECORD_SPEC,
    decode_features,
    dequantize_int8,
    feature_example,
    quantize_int8,
)
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.encoders import ImageEncoder
from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import decode_image


def reference(rows):
    """The scheme, written out: per image and channel, scale = the smallest float16 at or
    above max |x| / 127, q = round(x / scale); a silent channel keeps scale 0 and q 0."""
    rows = np.asarray(rows, np.float64)
    quantized = np.zeros(rows.shape, np.int8)
    scales = np.zeros(rows.shape[:-2] + rows.shape[-1:], np.float16)
    for index in np.ndindex(*rows.shape[:-2]):
        for c in range(rows.shape[-1]):
            column = rows[index][:, c]
            peak = np.abs(column).max()
            if peak == 0:
                continue
            scale = np.float16(peak / 127)
            if float(scale) < peak / 127:
                scale = np.nextafter(scale, np.float16(np.inf))
            scales[index][c] = scale
            quantized[index][:, c] = np.rint(np.float32(column) / np.float32(scale))
    return quantized, scales


def test_quantisation_matches_the_reference_and_stays_within_half_a_step():
    rng = np.random.default_rng(0)
    rows = np.maximum(rng.standard_normal((3, 16, 8)), 0).astype(np.float32)
    rows[..., 2] = 0  # a silent channel
    rows[0, :, 3] *= 1e-3  # a weak channel keeps its own resolution
    rows[1, :, 4] = -rng.random(16) * 50  # negative values: symmetric
    rows[2, :, 5] *= 1e-6  # a scale below float16's normal range
    quantized, scales = quantize_int8(rows)
    expected_q, expected_s = reference(rows)
    np.testing.assert_array_equal(scales, expected_s)
    np.testing.assert_array_equal(quantized, expected_q)
    assert not quantized[..., 2].any() and not scales[..., 2].any()
    assert np.abs(quantized).max() == 127  # each channel's peak is 127 steps, never clipped
    error = np.abs(dequantize_int8(quantized, scales) - rows)
    assert (error <= scales.astype(np.float32)[:, None, :] * 0.5 * (1 + 1e-6)).all()
    assert error[0, :, 3].max() < 1e-5  # 1e-3 of the others' range, still 127 steps
    assert error[2, :, 5].max() < 3.1e-8  # half of float16's smallest subnormal scale


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        (4, 3),
        elements=st.floats(-1e4, 1e4, allow_nan=False, allow_subnormal=False, width=32),
    )
)
def test_any_grid_round_trips_within_a_step_of_its_channel(rows):
    quantized, scales = quantize_int8(rows)
    np.testing.assert_array_equal(quantized, reference(rows)[0])
    error = np.abs(dequantize_int8(quantized, scales) - rows)
    scale = scales.astype(np.float32)
    assert (error <= scale * 0.5 * (1 + 1e-6)).all()  # half a step of the stored scale
    peak = np.abs(rows).max(axis=0)
    assert (scale <= peak / 127 * (1 + 2**-10) + 6e-8).all()  # the step: 1/127 of the peak


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8"])
@pytest.mark.parametrize("compression", ["none", "zlib"])
def test_records_parse_back_one_at_a_time_and_in_batches(dtype, compression):
    rng = np.random.default_rng(1)
    rows = np.maximum(rng.standard_normal((5, 12, 7)), 0).astype(np.float32)
    records = [feature_example(i, row, dtype, compression) for i, row in enumerate(rows)]
    if dtype == "int8":
        expected = dequantize_int8(*quantize_int8(rows))
    else:
        expected = rows.astype(dtype).astype(np.float32)
    batch = tf.io.parse_example(tf.constant(records), RECORD_SPEC)
    got = decode_features(batch, (12, 7), dtype, compression, tf.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    one = tf.io.parse_single_example(records[3], RECORD_SPEC)
    np.testing.assert_allclose(
        decode_features(one, (12, 7), dtype, compression, tf.float32), expected[3], rtol=1e-6
    )
    if dtype == "int8":  # the pipeline's default: float16, what the model casts to
        halves = decode_features(batch, (12, 7), dtype, compression)
        assert halves.dtype == tf.float16
        np.testing.assert_array_equal(halves, expected.astype(np.float16))
        values, scales = decode_features(batch, (12, 7), dtype, compression, tf.int8)
        np.testing.assert_array_equal(values, quantize_int8(rows)[0])


@pytest.fixture(scope="module")
def shapes_world(shapes_dir, tmp_path_factory):
    target = tmp_path_factory.mktemp("formats") / "shapes"
    shutil.copytree(shapes_dir, target)
    tf.keras.utils.set_random_seed(0)
    return read_karpathy(target / "dataset_shapes.json"), ImageEncoder("shapes_cnn")


def _shard_bytes(cache):
    return sum(os.path.getsize(name) for name in cache.files("val"))


@pytest.mark.slow
def test_int8_shards_take_half_of_float16s_bytes_and_zlib_less(shapes_world, tmp_path):
    dataset, encoder = shapes_world
    caches = {
        name: extract_features(
            encoder,
            dataset,
            tmp_path / name,
            splits=("val",),
            dtype=name.split("+")[0],
            compression=name.split("+")[1] if "+" in name else "none",
            log=lambda _: None,
        )[0]
        for name in ("float16", "int8", "int8+zlib")
    }
    sizes = {name: _shard_bytes(cache) for name, cache in caches.items()}
    count = caches["float16"].count("val")
    locations, channels = caches["float16"].num_locations, caches["float16"].channels
    # float16: 2 bytes a value; int8: 1, and two bytes of scale a channel (the framing's
    # varint lengths a few bytes shorter).
    saved = (sizes["float16"] - sizes["int8"]) / count
    assert 0 <= saved - (locations * channels - 2 * channels) <= 8
    assert sizes["float16"] / sizes["int8"] > 1.9
    assert sizes["int8+zlib"] < 0.8 * sizes["int8"]  # the ReLU's zeros
    pixels = np.stack(
        [decode_image(tf.io.read_file(str(r.path)), 128).numpy() for r in dataset.split("val")]
    )
    exact = encoder(pixels).numpy()
    step = np.abs(exact).max(axis=1, keepdims=True) / 127 * (1 + 2**-10) + 6e-8
    for name in ("int8", "int8+zlib"):
        positions, features = caches[name].load("val")
        np.testing.assert_array_equal(positions, np.arange(count))
        assert (np.abs(features - exact) <= step * 0.5 + 1e-6 * np.abs(exact)).all()


@pytest.mark.slow
def test_a_cache_of_another_format_is_refused(shapes_world, tmp_path):
    dataset, encoder = shapes_world
    quiet = lambda _: None  # noqa: E731
    extract_features(encoder, dataset, tmp_path / "c", splits=("test",), log=quiet)
    for dtype, compression, asked in (
        ("int8", "none", "int8"),
        ("float16", "zlib", "float16+zlib"),
    ):
        with pytest.raises(
            KerasSaatError, match=re.escape(f"the format float16 (asked: {asked}; ")
        ):
            extract_features(
                encoder,
                dataset,
                tmp_path / "c",
                splits=("test",),
                dtype=dtype,
                compression=compression,
                log=quiet,
            )
    with pytest.raises(KerasSaatError, match="cache compression 'lzma' is not one of none, zlib"):
        extract_features(encoder, dataset, tmp_path / "d", compression="lzma", log=quiet)
    assert FeatureCache(tmp_path / "c").dtype == "float16"
