"""The Shapes CNN's photometric pre-training: the augmentation varies what pictures vary
and leaves what a caption names (every colour keeps its name), and the pre-training scenes
span dark to light pages."""

import colorsys

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.data.shapes import (
    COLOURS,
    LIGHT_FALLOFF,
    PAGE_BAND,
    PAGE_LEVEL,
    light_field,
    object_mask,
    page_background,
    page_scene,
    sample_objects,
)
from keras_saat.encoders.shapes_cnn import (
    ATTRIBUTE_HEADS,
    attribute_trainer,
    build_shapes_cnn,
)
from keras_saat.images.photometry import (
    PhotometricViews,
    augmented_uint8,
    photometric_augmentation,
)

CHROMATIC = {name: rgb for name, rgb in COLOURS.items() if name != "white"}


def hue(rgb):
    return 360 * colorsys.rgb_to_hsv(*(np.asarray(rgb, float) / 255))[0]


def nearest_colour(rgb):
    def distance(name):
        gap = abs(hue(rgb) - hue(CHROMATIC[name])) % 360
        return min(gap, 360 - gap)

    return min(CHROMATIC, key=distance)


@pytest.mark.parametrize("compiled", [False, True], ids=["keras layers", "PhotometricViews"])
def test_every_augmented_colour_keeps_its_name_and_the_pictures_vary(compiled):
    # The layers as Keras runs them, and compiled by XLA as the pre-training runs them:
    # XLA draws other numbers from the seeds, within the same ranges.
    augment = PhotometricViews(seed=3) if compiled else photometric_augmentation(seed=3)
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


def test_the_views_are_compiled_on_their_own_and_repeat_by_seed():
    """Inside a step that TensorFlow runs op by op (Keras's "auto" on a CPU) the views
    are one XLA call; two layers of one seed draw the same views, another seed others."""
    pixels = np.random.default_rng(5).random((4, 16, 16, 3)).astype(np.float32)
    views = PhotometricViews(seed=1)
    step = tf.function(lambda x: views(x, training=True) * 2.0)
    graph = step.get_concrete_function(tf.TensorSpec(pixels.shape, tf.float32)).graph
    compiled = [
        op.type
        for op in graph.get_operations()
        if "_XlaMustCompile" in op.node_def.attr and op.get_attr("_XlaMustCompile")
    ]
    assert compiled == ["StatefulPartitionedCall"], compiled  # one call, XLA's
    first = [np.asarray(views(pixels, training=True)) for _ in range(2)]
    again = PhotometricViews(seed=1)
    second = [np.asarray(again(pixels, training=True)) for _ in range(2)]
    np.testing.assert_array_equal(first, second)  # the same views, step by step
    assert not np.array_equal(first[0], first[1])  # a new view each step
    other = np.asarray(PhotometricViews(seed=2)(pixels, training=True))
    assert not np.allclose(other, first[0])
    np.testing.assert_array_equal(views(pixels, training=False), pixels)


def test_pages_run_from_dark_to_light():
    rng = np.random.default_rng(0)
    ranges = np.array([page_background(rng) for _ in range(2000)])
    assert (ranges[:, 1] - ranges[:, 0] == PAGE_BAND).all()
    low, high = PAGE_LEVEL
    assert ranges[:, 0].min() < low + 10 and ranges[:, 0].max() > high - 10
    assert ranges[:, 1].max() <= 255


def test_light_falls_off_linearly_in_every_direction_by_up_to_the_falloff():
    rng = np.random.default_rng(4)
    fields = np.stack([light_field(rng) for _ in range(400)])  # (400, 128, 128)
    assert fields.max() <= 1.0 and fields.min() >= 1.0 - LIGHT_FALLOFF
    np.testing.assert_allclose(fields.max(axis=(1, 2)), 1.0, atol=0.01)
    falloffs = 1.0 - fields.min(axis=(1, 2))
    assert falloffs.min() < 0.05 and falloffs.max() > LIGHT_FALLOFF - 0.05
    # Linear: the second differences along a row or a column are zero.
    np.testing.assert_allclose(np.diff(fields, 2, axis=2), 0.0, atol=1e-9)
    np.testing.assert_allclose(np.diff(fields, 2, axis=1), 0.0, atol=1e-9)
    # Every direction: the lit corner is each of the four corners about as often.
    corners = fields[:, [0, 0, -1, -1], [0, -1, 0, -1]].argmax(axis=1)
    assert np.bincount(corners, minlength=4).min() > 60
    np.testing.assert_allclose(light_field(rng, falloff=0.2).min(), 0.8, atol=0.01)


def test_a_page_scene_is_the_scene_on_a_page_under_uneven_light():
    objects = sample_objects(np.random.default_rng(7))
    scenes = np.stack([page_scene(objects, np.random.default_rng(k)) for k in range(40)])
    inside = np.zeros((128, 128), bool)
    for obj in objects:
        inside |= object_mask(obj)
    pages = scenes[:, ~inside].astype(float)  # (40, pixels, 3)
    assert pages.mean(axis=(1, 2)).min() < 60 and pages.mean(axis=(1, 2)).max() > 150
    colour = np.asarray(COLOURS[objects[0]["colour"]], float)
    # Objects keep their colour up to the light's gain.
    for scene in scenes:
        mean = scene[object_mask(objects[0])].astype(float).mean(axis=0)
        gain = mean.sum() / colour.sum()
        assert 1 - LIGHT_FALLOFF - 0.05 < gain < 1.05
        np.testing.assert_allclose(mean / gain, colour, atol=12)
    # The page's light falls off as a plane: fit one to each page's brightness and read
    # how much darker its darkest corner is than its brightest.
    rows, cols = np.nonzero(~inside)
    design = np.stack([np.ones_like(rows), rows, cols], axis=1).astype(float)
    falloffs = []
    for page in pages[pages.mean(axis=(1, 2)) > 60]:  # bright enough to read a gain
        brightness = page.mean(axis=1)
        (level, down, across), *_ = np.linalg.lstsq(design, brightness, rcond=None)
        corners = level + np.array([0, 127 * down, 127 * across, 127 * (down + across)])
        falloffs.append(1 - corners.min() / corners.max())
    assert max(falloffs) > 0.2 and max(falloffs) < LIGHT_FALLOFF + 0.03, falloffs
    assert min(falloffs) < 0.1  # from about even light to the steepest


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


def test_the_trainer_augments_in_training_only_and_keeps_the_range():
    backbone = build_shapes_cnn((16, 16, 3), width=4, refine_layers=0)
    pixels = np.random.default_rng(1).random((8, 16, 16, 3)).astype(np.float32)
    for augment in (True, False):
        trainer = attribute_trainer(backbone, augment=augment, seed=1)
        assert set(trainer.output_names) == set(ATTRIBUTE_HEADS)
        names = [layer.name for layer in trainer.layers]
        if not augment:  # the scenes go to the CNN as they are
            assert names[1] == backbone.name
            continue
        assert names[1:3] == ["augmentation", backbone.name]  # the CNN sees what it makes
        augmentation = trainer.get_layer("augmentation")
        assert isinstance(augmentation, PhotometricViews)  # compiled (test below)
        # Inference sees the pixels as they are; training sees them augmented, clipped.
        np.testing.assert_allclose(augmentation(pixels, training=False), pixels, atol=1e-7)
        bright = np.clip(pixels * 1.5, 0, 1)  # brighter pixels: the clip has work to do
        seen = np.asarray(augmentation(bright, training=True))
        assert not np.allclose(seen, bright)
        assert seen.min() >= 0.0 and seen.max() <= 1.0
