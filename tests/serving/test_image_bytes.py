"""In-graph image decoding: every bad image is caught, the good ones decode as in training."""

import resource

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.data.images import decode_image
from keras_saat.serving.image_bytes import decode_images, inspect_images
from tests.serving.images import BAD, GOOD, encode, forged_png

SIZE = 32


@pytest.fixture(scope="module")
def batch():
    """Good and bad images interleaved in one batch, with the expected error of each."""
    items = []
    for (good_name, good), (bad_name, (bad, message)) in zip(
        list(GOOD.items()) * 2, BAD.items(), strict=False
    ):
        items.append((good_name, good(), ""))
        items.append((bad_name, bad(), message))
    return items


def test_one_bad_image_never_fails_the_batch(batch):
    decode = tf.function(lambda data: decode_images(data, SIZE))
    pixels, valid, error = decode(tf.constant([data for _, data, _ in batch]))
    assert pixels.shape == (len(batch), SIZE, SIZE, 3)
    for (name, data, message), ok, text, image in zip(
        batch, valid.numpy(), error.numpy(), pixels.numpy(), strict=True
    ):
        text = text.decode()
        if message:
            assert not ok and message in text, (name, text)
            assert not image.any(), name
        else:
            assert ok and text == "", (name, text)
            # The same pixels as training and `Captioner.generate` see.
            np.testing.assert_array_equal(image, decode_image(data, SIZE).numpy(), err_msg=name)


def test_every_bad_case_is_named_in_the_error():
    data = [make() for make, _ in BAD.values()]
    valid, error = inspect_images(tf.constant(data))
    for (name, (_, message)), ok, text in zip(
        BAD.items(), valid.numpy(), error.numpy(), strict=True
    ):
        if "truncated or corrupt" in message:  # the header is fine; the decoder finds out
            assert ok, name
        else:
            assert not ok and message in text.decode(), (name, text)


def test_the_pixel_limit_is_inclusive():
    image = encode("PNG", size=(40, 30))  # 1,200 pixels
    for limit, expected in ((1200, True), (1199, False)):
        _, valid, error = decode_images(tf.constant([image]), SIZE, max_pixels=limit)
        assert bool(valid[0]) is expected
        if not expected:
            assert "declares 40x30 pixels, over the limit of 1199" in error[0].numpy().decode()


def test_a_forged_header_costs_no_memory():
    """A 60000 x 60000 header would need 10.8 GB to decode; it is refused from the header."""
    decode = tf.function(lambda data: decode_images(data, SIZE))
    decode(tf.constant([encode("PNG")]))  # trace first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    _, valid, _ = decode(tf.constant([forged_png(60000, 60000)] * 8 + [encode("PNG")]))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert valid.numpy().tolist() == [False] * 8 + [True]
    assert (after - before) / 1024 < 200, f"peak memory grew by {(after - before) / 1024:.0f} MB"


def test_an_empty_batch():
    pixels, valid, error = decode_images(tf.constant([], tf.string), SIZE)
    assert pixels.shape == (0, SIZE, SIZE, 3) and valid.shape == (0,) and error.shape == (0,)
