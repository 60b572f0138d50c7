import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat.encoders import (
    ImageEncoder,
    available_backbones,
    build_feature_model,
    get_backbone_spec,
)
from keras_saat.encoders.preprocessing import caffe, torch
from keras_saat.encoders.shapes_cnn import attribute_targets, build_shapes_cnn
from keras_saat.errors import KerasSaatError


def test_registry_lists_the_paper_and_modern_backbones():
    names = available_backbones()
    for name in [
        "vgg16",
        "vgg19",
        "shapes_cnn",
        "shapes_cnn_small",
        "shapes_cnn_norm",
        "shapes_cnn_small_norm",
        "efficientnetv2s",
        *(f"efficientnetb{i}" for i in range(8)),
    ]:
        assert name in names


def test_unknown_backbone_names_the_nearest():
    with pytest.raises(
        KerasSaatError, match=r"unknown backbone 'vgg17' \(did you mean \"vgg1[69]\"\?\)"
    ):
        get_backbone_spec("vgg17")


@pytest.mark.parametrize(
    "name, grid, channels",
    [
        ("vgg16", (14, 14), 512),
        ("efficientnetb0", (7, 7), 1280),
        ("shapes_cnn", (8, 8), 128),
        ("shapes_cnn_small", (8, 8), 96),
        ("shapes_cnn_small_norm", (8, 8), 96),
    ],
)
def test_feature_maps_have_the_documented_shape(name, grid, channels):
    encoder = ImageEncoder(name)
    pixels = np.random.default_rng(0).uniform(
        0, 255, (1, encoder.image_size, encoder.image_size, 3)
    )
    features = encoder(pixels.astype("float32"))
    assert encoder.grid_shape == grid and features.shape == (1, grid[0] * grid[1], channels)
    assert encoder.trainable_weights == []  # frozen by default (the paper)


def test_qubvel_efficientnet_when_installed():
    pytest.importorskip("efficientnet")
    encoder = ImageEncoder("efficientnet_qubvel_b0")
    assert (
        encoder.grid_shape == (7, 7)
        and encoder.feature_channels == 1280
        and encoder.preprocessing == "torch"
    )


def test_flattening_is_row_major():
    encoder = ImageEncoder("shapes_cnn")
    pixels = np.random.default_rng(1).uniform(0, 255, (2, 128, 128, 3)).astype("float32")
    grid = encoder.feature_model(encoder.preprocess(pixels)).numpy()  # (2, 8, 8, C)
    flat = encoder(pixels).numpy()
    np.testing.assert_allclose(flat[:, 8 * 2 + 5], grid[:, 2, 5], rtol=1e-6)


def test_preprocessing_matches_keras_applications():
    pixels = np.random.default_rng(2).uniform(0, 255, (2, 4, 4, 3)).astype("float32")
    expected = keras.applications.vgg16.preprocess_input(pixels.copy())
    np.testing.assert_allclose(caffe(tf.constant(pixels)), expected, rtol=1e-5, atol=1e-4)
    expected = keras.applications.imagenet_utils.preprocess_input(pixels.copy(), mode="torch")
    np.testing.assert_allclose(torch(tf.constant(pixels)), expected, rtol=1e-5, atol=1e-5)


def test_trainable_top_layers():
    encoder = ImageEncoder("shapes_cnn", trainable_layers=2)
    trainable = {w.path.split("/")[-2] for w in encoder.trainable_weights}
    assert trainable == {"refine2_bn", "features"}


def test_local_weights_file_round_trip_and_errors(tmp_path):
    model = build_shapes_cnn()
    path = tmp_path / "cnn.weights.h5"
    model.save_weights(str(path))
    encoder = ImageEncoder("shapes_cnn", weights=str(path))
    pixels = np.random.default_rng(3).uniform(0, 255, (1, 128, 128, 3)).astype("float32")
    np.testing.assert_allclose(
        encoder(pixels), tf.reshape(model(pixels / 255.0), (1, 64, 128)), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(KerasSaatError, match="backbone weights file not found"):
        build_feature_model("shapes_cnn", weights=str(tmp_path / "missing.h5"))
    with pytest.raises(KerasSaatError, match="cannot load backbone weights"):
        build_feature_model("vgg16", image_size=64, weights=str(path))
    with pytest.raises(KerasSaatError, match="no ImageNet weights"):
        build_feature_model("shapes_cnn", weights="imagenet")
    # The two Shapes CNNs differ in width: one's weights do not go into the other.
    with pytest.raises(KerasSaatError, match="cannot load backbone weights"):
        build_feature_model("shapes_cnn_small", weights=str(path))
    with pytest.raises(KerasSaatError, match="backbone 'shapes_cnn_small' has no ImageNet weights"):
        build_feature_model("shapes_cnn_small", weights="imagenet")


def test_attribute_targets_mark_the_object_under_each_location():
    obj = {
        "shape": "square",
        "colour": "red",
        "size": "large",
        "cell": [0, 0],
        "box": [0, 0, 32, 32],
    }
    targets = attribute_targets([[obj]], (8, 8))
    assert (targets["shape"][0, :2, :2] == 2).all()  # square is class 1 + index 1
    assert targets["shape"][0].sum() == 2 * 4 and (targets["row"][0, :2, :2] == 1).all()


@pytest.mark.parametrize("image_size", [64, 192, 256])
def test_attribute_targets_follow_the_scene_read_at_another_size(image_size):
    """The world's boxes are 128-pixel ones: an image read at another size labels the
    grid as the 128-pixel image does, but for a location whose cover sits at the
    threshold, which pixels of another size count differently."""
    from keras_saat.data.shapes import sample_objects

    scenes = [sample_objects(np.random.default_rng(seed)) for seed in range(20)]
    at_world = attribute_targets(scenes, (8, 8), 128)
    resized = attribute_targets(scenes, (8, 8), image_size)
    for head in at_world:
        assert (resized[head] != at_world[head]).mean() < 0.01, head
    assert (at_world["shape"] > 0).mean() > 0.1  # the scenes' objects cover locations


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_pretraining_batches_hold_every_scene_once_an_epoch_with_its_targets(dtype):
    from keras_saat.encoders.shapes_cnn import _scene_batches

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(10, 4, 4, 3)).astype(dtype)
    if dtype == np.float32:
        images = np.clip(images + 0.25, 0, 255)  # resized pixels: held rounded, as uint8
    targets = {"shape": np.arange(10, dtype=np.int32)[:, None, None] * np.ones((1, 2, 2), np.int32)}
    batches = _scene_batches(images, targets, batch_size=4, seed=3)
    orders = []
    for _ in range(2):  # two epochs
        seen = []
        for pixels, labels in batches:
            assert pixels.dtype == tf.float32 and pixels.shape[0] <= 4
            index = labels["shape"].numpy()[:, 0, 0]
            expected = np.rint(images[index].astype(np.float64)) / 255
            np.testing.assert_allclose(pixels.numpy(), expected, rtol=1e-6)
            seen += list(index)
        assert sorted(seen) == list(range(10))
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled each epoch


def test_pretraining_scenes_read_at_another_size_are_held_as_rounded_uint8():
    """A CNN pre-trained at `model.image_size` 192 holds its extra scenes resized: as uint8
    (a quarter of float32's memory), each pixel the resize rounded, `chunk` at a time."""
    from keras_saat.encoders.shapes_cnn import _as_uint8, _resized_uint8
    from keras_saat.images.decoding import resize_image

    scenes = np.random.default_rng(1).integers(0, 256, size=(5, 16, 16, 3)).astype(np.uint8)
    resized = _resized_uint8(scenes, 24, chunk=2)
    exact = resize_image(scenes, 24).numpy()
    assert resized.dtype == np.uint8 and resized.shape == (5, 24, 24, 3)
    np.testing.assert_array_equal(resized, np.clip(np.rint(exact), 0, 255))
    assert np.abs(exact - np.rint(exact)).max() > 0.1  # the resize made fractions to round
    whole = scenes.astype(np.float32)  # scenes at their rendered size keep every value
    np.testing.assert_array_equal(_as_uint8(whole, chunk=3), scenes)


def test_a_standardised_shapes_cnn_sees_exposure_and_contrast_as_nothing():
    """`_norm` variants: pixels a x + b (a > 0, none clipped) give the features of x, to the
    epsilon's share of the variance; without standardising they move far."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    pixels = rng.uniform(0.1, 0.7, (2, 128, 128, 3)).astype("float32")
    changed = 0.6 * pixels + 0.25  # lower contrast, brighter: still inside [0, 1]
    moved = {}
    for standardize in (True, False):
        cnn = build_shapes_cnn(width=8, standardize=standardize)
        before, after = np.asarray(cnn(pixels)), np.asarray(cnn(changed))
        moved[standardize] = np.abs(after - before).max() / np.abs(before).max()
    assert moved[True] < 0.05  # the epsilon (1e-3) against variances of 0.01-0.03
    assert moved[False] > 5 * moved[True]
    stem = build_shapes_cnn(width=8, standardize=True).get_layer("standardize")
    standardised = np.asarray(stem(changed))
    np.testing.assert_allclose(standardised.mean(axis=(1, 2, 3)), 0.0, atol=1e-5)
    np.testing.assert_allclose(standardised.std(axis=(1, 2, 3)), 1.0, atol=0.1)
