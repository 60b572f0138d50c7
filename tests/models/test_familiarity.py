"""Familiarity: a captioner calibrated on Shapes scenes flags photographs, not its own world."""

import warnings
import zipfile
from pathlib import Path

import h5py
import keras
import matplotlib
import numpy as np
import pytest
import skimage.data
from PIL import Image

from keras_saat.data.shapes import page_scene, render, sample_objects
from keras_saat.errors import KerasSaatError
from keras_saat.layers.feature_familiarity import (
    FeatureFamiliarity,
    fit_familiarity,
    joint_thresholds,
    pooled_vectors,
)
from keras_saat.models.captioner import Captioner
from tests.helpers import small_model


def shapes_scenes(count, seed, pages=0.0):
    """Shapes scenes; a share `pages` of them on varied pages under uneven light, as the
    demo's training world draws half of its scenes."""
    rng = np.random.default_rng(seed)
    return np.stack(
        [
            page_scene(sample_objects(rng), rng)
            if rng.random() < pages
            else render(sample_objects(rng), rng)
            for _ in range(count)
        ]
    )


def grace_hopper():
    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


PHOTOGRAPHS = {
    "astronaut": skimage.data.astronaut,
    "coffee": skimage.data.coffee,
    "grace_hopper": grace_hopper,
}


@pytest.fixture(scope="module")
def calibrated():
    """A small captioner on the packaged Shapes CNN, calibrated on 300 training-world
    scenes (half on varied pages) and 60 validation scenes."""
    model, _ = small_model(backbone="shapes_cnn_small_norm", backbone_weights="shapes")
    summary = model.calibrate_familiarity(
        shapes_scenes(300, seed=0, pages=0.5), validation=shapes_scenes(60, seed=1)
    )
    return model, summary


def test_a_calibrated_model_flags_photographs_and_not_shapes_scenes(calibrated):
    model, summary = calibrated
    assert summary["images"] == 300 and summary["validation_images"] == 60
    assert model.familiarity_calibrated
    scenes = model.generate(shapes_scenes(100, seed=2), return_details=True)
    flagged = [r["novelty"] for r in scenes if not r["familiar"]]
    assert len(flagged) <= 2, flagged
    assert all(r["familiar"] == (r["novelty"] <= 1.0) for r in scenes)
    for name, photograph in PHOTOGRAPHS.items():
        result = model.generate(photograph(), return_details=True)[0]
        assert not result["familiar"] and result["novelty"] > 1.0, (name, result["novelty"])


def test_novelty_is_the_mahalanobis_distance_over_the_threshold():
    """The layer against a NumPy reference written from the definition: the signed square
    root of location-mean features, the inverse of the shrunk covariance, the quantile of
    out-of-fold training and validation distances."""
    rng = np.random.default_rng(3)
    train = rng.gamma(2.0, 1.0, (60, 4, 6))  # (N, L, C), ReLU-like
    val = rng.gamma(2.0, 1.0, (10, 4, 6))
    probe = rng.normal(0.0, 2.0, (5, 4, 6))  # negative means too

    def vectors(features):
        m = features.mean(axis=1)
        return np.sign(m) * np.sqrt(np.abs(m))

    def fit(x):
        mean, cov = x.mean(0), np.cov(x.T)
        shrunk = 0.9 * cov + 0.1 * np.trace(cov) / 6 * np.eye(6)
        return mean, np.linalg.inv(shrunk)

    def distance(x, mean, precision):
        return np.einsum("nc,cd,nd->n", x - mean, precision, x - mean) / 6

    folds = np.arange(60) % 5
    held = np.zeros(60)
    for k in range(5):
        held[folds == k] = distance(vectors(train)[folds == k], *fit(vectors(train)[folds != k]))
    mean, precision = fit(vectors(train))
    scores = np.concatenate([held, distance(vectors(val), mean, precision)])
    threshold = np.quantile(scores, 0.9)

    statistics = fit_familiarity(pooled_vectors(train), pooled_vectors(val), quantile=0.9)
    np.testing.assert_allclose(statistics["threshold"], threshold, rtol=1e-10)
    layer = FeatureFamiliarity(6)
    assert np.isnan(np.asarray(layer(probe.astype("float32")))).all()  # never fitted
    layer.assign(statistics)
    want = distance(vectors(probe), mean, precision) / threshold
    np.testing.assert_allclose(np.asarray(layer(probe.astype("float32"))), want, rtol=1e-4)


def test_novelty_with_unlike_pictures_is_the_larger_of_distance_and_discriminant():
    """With unlike pictures, novelty = max(d2 / t, a / t_a), a the projection on Fisher's
    discriminant (S_in + S_unlike, each shrunk 0.01, solved against the means' difference,
    unit length), both thresholds at one quantile of held-out images that keeps 0.9 of
    them: a NumPy reference written from those definitions."""
    rng = np.random.default_rng(4)
    train = rng.gamma(2.0, 1.0, (80, 4, 6))
    unlike = rng.gamma(3.0, 1.0, (40, 4, 6))
    probe = rng.gamma(2.5, 1.2, (7, 4, 6))
    v_train, v_unlike, v_probe = map(pooled_vectors, (train, unlike, probe))

    def shrunk(x, s):
        cov = np.cov(x.T)
        return (1 - s) * cov + s * np.trace(cov) / 6 * np.eye(6)

    def fit(x):
        mean = x.mean(0)
        w = np.linalg.solve(shrunk(x, 0.01) + shrunk(v_unlike, 0.01), v_unlike.mean(0) - mean)
        return mean, np.linalg.inv(shrunk(x, 0.1)), w / np.linalg.norm(w)

    def measure(x, mean, precision, w):
        return np.einsum("nc,cd,nd->n", x - mean, precision, x - mean) / 6, (x - mean) @ w

    folds = np.arange(80) % 5
    d, a = np.zeros(80), np.zeros(80)
    for k in range(5):
        d[folds == k], a[folds == k] = measure(v_train[folds == k], *fit(v_train[folds != k]))
    # The joint thresholds: the smallest per-signal quantile that keeps 0.9 of both.
    for q in np.linspace(0.9, 1.0, 100001):
        t_d, t_a = np.quantile(d, q), np.quantile(a, q)
        if np.mean((d <= t_d) & (a <= t_a)) >= 0.9:
            break

    statistics = fit_familiarity(v_train, quantile=0.9, unlike_vectors=v_unlike)
    np.testing.assert_allclose(statistics["threshold"], t_d, rtol=1e-4)
    np.testing.assert_allclose(statistics["direction_threshold"], t_a, rtol=1e-4)
    layer = FeatureFamiliarity(6)
    layer.assign(statistics)
    d_probe, a_probe = measure(v_probe, *fit(v_train))
    want = np.maximum(d_probe / t_d, a_probe / t_a)
    np.testing.assert_allclose(np.asarray(layer(probe.astype("float32"))), want, rtol=1e-4)


def test_joint_thresholds_keep_the_quantile_of_held_out_images():
    rng = np.random.default_rng(5)
    for correlation in (0.0, 0.6, 1.0):
        d = rng.normal(size=5000)
        a = correlation * d + np.sqrt(1 - correlation**2) * rng.normal(size=5000)
        t_d, t_a = joint_thresholds(d, a, 0.99)
        kept = np.mean((d <= t_d) & (a <= t_a))
        assert 0.99 <= kept <= 0.9905, (correlation, kept)
    # Perfectly correlated signals need no stricter per-signal quantile than the target.
    np.testing.assert_allclose(t_d, np.quantile(d, 0.99), rtol=1e-3)


def test_calibrating_from_features_equals_calibrating_from_images(calibrated):
    model, _ = calibrated
    train = shapes_scenes(40, seed=4).astype("float32")
    val = shapes_scenes(10, seed=5).astype("float32")
    by_images = model.with_settings()
    by_images.calibrate_familiarity(train, validation=val)
    by_features = model.with_settings()
    encode = model.encoder.compiled()
    batches = (np.asarray(encode(train[i : i + 16])) for i in range(0, 40, 16))  # a stream
    by_features.calibrate_familiarity(features=batches, validation=np.asarray(encode(val)))
    for a, b in zip(by_images.familiarity.weights, by_features.familiarity.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_keras_file_and_preset_keep_the_statistics(calibrated, tmp_path):
    model, _ = calibrated
    photo = skimage.data.astronaut()
    want = model.generate(photo, return_details=True)[0]["novelty"]
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    preset = Captioner.from_preset(model.save_to_preset(tmp_path / "preset"))
    for other in (loaded, preset):
        assert other.familiarity_calibrated
        got = other.generate(photo, return_details=True)[0]["novelty"]
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_model_never_calibrated_says_so_and_reads_familiar():
    model, _ = small_model()
    assert not model.familiarity_calibrated
    result = model.generate(np.zeros((32, 32, 3)), return_details=True)[0]
    assert np.isnan(result["novelty"]) and result["familiar"] is True


def all_names(h5):
    names = []
    h5.visit(names.append)
    return names


def test_a_file_saved_before_familiarity_existed_loads_uncalibrated(tmp_path):
    model, _ = small_model()
    model.save(tmp_path / "new.keras")
    old = tmp_path / "old.keras"  # the same file without the familiarity statistics
    with zipfile.ZipFile(tmp_path / "new.keras") as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "model.weights.h5":
                weights = tmp_path / "weights.h5"
                weights.write_bytes(data)
                with h5py.File(weights, "r+") as h5:
                    names = [n for n in all_names(h5) if n.endswith("familiarity")]
                    assert names
                    for name in names:
                        del h5[name]
                data = weights.read_bytes()
            dst.writestr(item, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing said about missing variables either
        loaded = keras.saving.load_model(old)
    assert not loaded.familiarity_calibrated
    for a, b in zip(model.decoder.weights, loaded.decoder.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_too_few_training_images_say_so():
    model, _ = small_model()
    with pytest.raises(KerasSaatError, match="more than 5 training images"):
        model.calibrate_familiarity(np.zeros((3, 32, 32, 3)))
