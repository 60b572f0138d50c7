"""The Shapes CNN's photometric pre-training: the augmentation varies what pictures vary
and leaves what a caption names (every colour keeps its name), and the pre-training scenes
span dark to light pages."""

import colorsys

import numpy as np

from keras_saat.data.shapes import COLOURS, PAGE_BAND, PAGE_LEVEL, page_background
from keras_saat.encoders.shapes_cnn import _scene_batches, attribute_targets
from keras_saat.images.photometry import augmented_uint8, photometric_augmentation

CHROMATIC = {name: rgb for name, rgb in COLOURS.items() if name != "white"}


def hue(rgb):
    return 360 * colorsys.rgb_to_hsv(*(np.asarray(rgb, float) / 255))[0]


def nearest_colour(rgb):
    def distance(name):
        gap = abs(hue(rgb) - hue(CHROMATIC[name])) % 360
        return min(gap, 360 - gap)

    return min(CHROMATIC, key=distance)


def test_every_augmented_colour_keeps_its_name_and_the_pictures_vary():
    augment = photometric_augmentation(seed=3)
    names = list(CHROMATIC)
    # 64 patches of each colour on a dark page, one pixel of colour in the middle of each.
    patches = np.zeros((64 * len(names), 8, 8, 3), np.float32) + 30 / 255
    for i, name in enumerate(names):
        patches[64 * i : 64 * (i + 1), 2:6, 2:6] = np.asarray(CHROMATIC[name]) / 255
    out = np.clip(np.asarray(augment(patches, training=True)), 0, 1)
    centres = out[:, 4, 4] * 255
    got = [nearest_colour(c) for c in centres]
    want = [name for name in names for _ in range(64)]
    assert got == want
    spread = centres.reshape(len(names), 64, 3).std(axis=1)  # (colours, 3)
    assert (spread.max(axis=1) > 10).all(), spread  # exposure and contrast moved them
    assert np.array_equal(np.asarray(augment(patches, training=False)), patches)


def test_pages_run_from_dark_to_light():
    rng = np.random.default_rng(0)
    ranges = np.array([page_background(rng) for _ in range(2000)])
    assert (ranges[:, 1] - ranges[:, 0] == PAGE_BAND).all()
    low, high = PAGE_LEVEL
    assert ranges[:, 0].min() < low + 10 and ranges[:, 0].max() > high - 10
    assert ranges[:, 1].max() <= 255


def test_uint8_views_vary_by_seed_and_keep_the_scene():
    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, (5, 16, 16, 3)).astype(np.uint8)
    first, again, other = (
        augmented_uint8(pixels, 1),
        augmented_uint8(pixels, 1),
        augmented_uint8(pixels, 2),
    )
    assert first.dtype == np.uint8 and first.shape == pixels.shape
    np.testing.assert_array_equal(first, again)  # seeded: a dataset's views are repeatable
    assert not np.array_equal(first, other) and not np.array_equal(first, pixels)
    # Photometric only: the picture's structure stays (pixel ranks barely move).
    rank = lambda a: np.argsort(np.argsort(a.reshape(5, -1, 3)[..., 1], axis=1), axis=1)  # noqa: E731
    assert np.corrcoef(rank(first).ravel(), rank(pixels).ravel())[0, 1] > 0.9


def test_augmented_batches_keep_their_targets_and_range():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (8, 16, 16, 3)).astype(np.uint8)
    targets = attribute_targets([[]] * 8, (2, 2), 16)
    plain = next(iter(_scene_batches(images, targets, 8, seed=0)))
    varied = next(iter(_scene_batches(images, targets, 8, seed=0, augment=True)))
    assert varied[0].shape == plain[0].shape
    assert float(np.min(varied[0])) >= 0 and float(np.max(varied[0])) <= 1
    assert not np.allclose(varied[0], plain[0])
    for head in targets:
        np.testing.assert_array_equal(varied[1][head], plain[1][head])
