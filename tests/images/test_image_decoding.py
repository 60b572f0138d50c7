"""In-graph image decoding: every bad image is caught, the good ones decode as in training."""

import collections
import io
import resource

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import (
    ALPHA_BACKGROUND,
    decode_image,
    decode_images,
    load_image,
    load_images,
    resize_image,
)
from keras_saat.images.header_checks import inspect_image, inspect_images
from tests.helpers import BAD, GOOD, encode, forged_gif, forged_png, gif_of_frames

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


def test_the_header_checks_trace_to_the_graph_autograph_would_give():
    """`inspect_image` tells AutoGraph not to convert it (2-4 s a process): converted,
    it gives the same ops, in the graph and in its tf.cond and tf.while_loop bodies."""

    def ops(autograph):
        function = tf.function(inspect_image.__wrapped__, autograph=autograph)
        graph = function.get_concrete_function(tf.TensorSpec([], tf.string)).graph
        definition = graph.as_graph_def()
        count = collections.Counter(node.op for node in definition.node)
        for body in definition.library.function:
            count.update(node.op for node in body.node_def)
        return count

    converted = ops(autograph=True)
    assert converted["StatelessWhile"] + converted["While"] >= 4  # the walkers' loops
    assert ops(autograph=False) == converted


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
    valid, error, _, _ = inspect_images(tf.constant(data))
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


def test_a_gif_is_as_large_as_its_largest_frame_whatever_its_screen_says():
    """TensorFlow decodes a GIF onto a canvas the size of its largest frame."""
    small_screen = forged_gif(40, 30, screen=(4, 4))
    for limit, expected in ((1200, True), (1199, False)):
        valid, error, _, _ = inspect_images(tf.constant([small_screen]), limit)
        assert bool(valid[0]) is expected, error[0].numpy()
    frames = [encode("GIF", size=(10, 10)), encode("GIF", size=(40, 30))]
    assert tf.io.decode_gif(gif_of_frames(frames)).shape[1:3] == (30, 40)
    valid, error, _, _ = inspect_images(tf.constant([gif_of_frames(frames)]), 1199)
    assert not valid[0] and "declares 40x30 pixels" in error[0].numpy().decode()


def test_the_frames_of_a_gif_count_together():
    many = forged_gif(100, 100, frames=12)  # 12 x 10,000 pixels
    valid, error, _, _ = inspect_images(tf.constant([many]), 100_000)
    assert not valid[0] and "12 frames hold 120000 pixels" in error[0].numpy().decode()


def test_crop_cuts_the_centre_square_before_resizing():
    image = np.zeros((3, 4000, 3), np.uint8)
    image[:, 1998:2002] = 255  # the centre: the only part that survives the crop
    out = resize_image(image, 16, "crop").numpy()
    assert out.shape == (16, 16, 3) and out.min() > 100
    tall = resize_image(np.full((4000, 1, 3), 7, np.uint8), 16, "pad").numpy()
    assert tall[:, 7].min() == 7 and tall[:, :7].max() == 0 and tall[:, 8:].max() == 0  # 1 wide


@pytest.mark.parametrize("orientation", range(1, 9))
def test_jpeg_exif_orientation_turns_the_image_upright(orientation):
    """The same pixels as Pillow's ImageOps.exif_transpose of TensorFlow's own decode."""
    pixels = np.random.default_rng(orientation).integers(0, 256, (30, 50, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", exif=exif.tobytes(), quality=95)
    data = buffer.getvalue()
    stored = Image.fromarray(tf.io.decode_jpeg(data).numpy())
    stored.info["exif"] = exif.tobytes()
    upright = np.asarray(ImageOps.exif_transpose(stored), np.float32)
    expected = tf.image.resize(upright, (SIZE, SIZE)).numpy()
    np.testing.assert_array_equal(decode_image(data, SIZE, "stretch").numpy(), expected)
    _, _, fmt, found = inspect_images(tf.constant([data]))
    assert int(found[0]) == orientation


def test_transparent_png_pixels_are_composited_onto_white():
    rgba = np.zeros((20, 40, 4), np.uint8)
    rgba[:, 20:] = (200, 10, 10, 255)  # the right half opaque red; the left half transparent
    buffer = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buffer, "PNG")
    out = decode_image(buffer.getvalue(), 20, "stretch").numpy()
    np.testing.assert_allclose(out[:, :8], ALPHA_BACKGROUND)
    np.testing.assert_allclose(out[:, 12:], np.broadcast_to([200, 10, 10], (20, 8, 3)))
    padded = decode_image(buffer.getvalue(), 20, "pad").numpy()  # 10 rows of image, centred
    assert padded[:4].max() == 0 and padded[-4:].max() == 0  # padding stays black
    assert padded[10, 2].min() == ALPHA_BACKGROUND


def test_a_refused_image_names_its_reason_eagerly_and_in_a_pipeline(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(forged_png(60000, 60000))
    with pytest.raises(KerasSaatError, match="bomb.png: image too large: the PNG header declares"):
        load_image(path, SIZE)
    with pytest.raises(KerasSaatError, match="bomb.png: image too large"):
        load_images([path], SIZE)  # graph mode, then the eager retry that names the file
