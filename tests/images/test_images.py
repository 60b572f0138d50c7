import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import decode_image, load_image, load_images, resize_image


def wide_image():
    """100 x 200: left quarter red, middle half green, right quarter blue."""
    image = np.zeros((100, 200, 3), np.uint8)
    image[:, :50, 0] = 255
    image[:, 50:150, 1] = 255
    image[:, 150:, 2] = 255
    return image


def test_crop_keeps_the_centre_at_the_aspect_ratio():
    out = resize_image(wide_image(), 50, "crop").numpy()
    assert out.shape == (50, 50, 3)
    assert out[:, 2:-2, 1].min() > 250 and out[..., 0].max() < 5 and out[..., 2].max() < 5


def test_pad_keeps_everything_and_pads_with_zeros():
    out = resize_image(wide_image(), 50, "pad").numpy()
    assert out.shape == (50, 50, 3)
    assert out[:10].max() == 0 and out[-10:].max() == 0  # 25 rows of image, centred
    assert out[25, 2, 0] > 250 and out[25, 25, 1] > 250 and out[25, -2, 2] > 250


def test_stretch_and_unknown_mode():
    out = resize_image(wide_image(), 50, "stretch").numpy()
    assert out[:, 2, 0].min() > 250 and out[:, -2, 2].min() > 250
    with pytest.raises(KerasSaatError, match="resize mode 'squash'"):
        resize_image(wide_image(), 50, "squash")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP"])
def test_decode_formats(tmp_path, fmt):
    path = tmp_path / f"x.{fmt.lower()}"
    Image.fromarray(wide_image()).save(path, format=fmt)
    out = decode_image(tf.io.read_file(str(path)), 64, "stretch").numpy()
    assert out.shape == (64, 64, 3) and out[:, 2, 0].mean() > 200


def test_load_image_errors_name_the_file(tmp_path):
    with pytest.raises(KerasSaatError, match="image file not found: .*nope.png"):
        load_image(tmp_path / "nope.png", 32)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(KerasSaatError, match="cannot read image .*bad.png"):
        load_image(tmp_path / "bad.png", 32)


@pytest.mark.slow
def test_load_images_stacks_load_image_and_names_a_bad_file(tmp_path):
    sizes = [(100, 200), (64, 64), (50, 30), (128, 128), (90, 91)]
    paths = []
    for i, (h, w) in enumerate(sizes):
        paths.append(tmp_path / f"{i}.png")
        pixels = np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(paths[-1])
    for mode in ("crop", "pad", "stretch"):
        stacked = load_images(paths, 48, mode)
        # the traced graph, run from threads, equals the ops run one by one
        expected = np.stack([decode_image(tf.io.read_file(str(p)), 48, mode) for p in paths])
        assert stacked.shape == (5, 48, 48, 3) and stacked.dtype == np.float32
        np.testing.assert_array_equal(stacked, expected)
    assert load_images([], 48).shape == (0, 48, 48, 3)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(KerasSaatError, match="cannot read image .*bad.png"):
        load_images([*paths[:3], tmp_path / "bad.png", paths[3]], 48)
    with pytest.raises(KerasSaatError, match="image file not found: .*nope.png"):
        load_images([tmp_path / "nope.png", *paths], 48)
    with pytest.raises(KerasSaatError, match="resize mode 'squash'"):
        load_images(paths, 48, "squash")


def test_only_regular_files_of_at_most_64_mib_are_read(tmp_path):
    big = tmp_path / "big.png"
    with open(big, "wb") as sparse:  # 65 MiB of holes: never read
        sparse.truncate(65 << 20)
    with pytest.raises(
        KerasSaatError, match="big.png: the file is 68157440 bytes, over the 64 MiB"
    ):
        load_image(big, 48)
    os.mkfifo(tmp_path / "pipe.png")  # opening it for reading would block
    with pytest.raises(KerasSaatError, match="pipe.png: a FIFO, not a regular file"):
        load_images([tmp_path / "pipe.png"], 48)
    with pytest.raises(KerasSaatError, match="cannot read image .*: a folder"):
        load_image(tmp_path, 48)
