"""FeatureFamiliarity: how far an image's backbone features lie from the training images'.

A captioner names what it learnt to name, whatever it is shown; this layer flags when
the picture is unlike the training pictures. It mean-pools the annotation grid, takes
each channel's signed square root (Perronnin et al., ECCV 2010), and measures the
squared Mahalanobis distance from the training mean under a shrunk covariance:

    v = sign(m) sqrt(|m|),  m = mean_i f_i                     (C,)
    d2 = |(v - mu) W|^2 / C,  W W^T = ((1 - s) S + s tr(S)/C I)^-1
    novelty = d2 / threshold

`threshold` is a high quantile of held-out familiar images' d2, so novelty above 1
marks an unfamiliar image. The statistics are non-trainable weights, so every saved and
exported form carries them; a layer never fitted answers NaN.
"""

import keras
import numpy as np
from keras import ops

# The share of held-out familiar images whose novelty stays at or below 1.
DEFAULT_QUANTILE = 0.995
# How far the covariance is pulled towards a multiple of the identity.
DEFAULT_SHRINKAGE = 0.1
# Training images are scored by statistics fitted on the other folds (out of fold), so
# the threshold sees distances of images the statistics never saw, as a new image's are.
FOLDS = 5


def signed_sqrt(values):
    """sign(x) sqrt(|x|) with ops every export has (relu, sqrt, subtract)."""
    return ops.sqrt(ops.relu(values)) - ops.sqrt(ops.relu(-values))


def pooled_vectors(features):
    """(B, L, C) features -> (B, C) float64 vectors, location-mean pooled and signed-square-rooted."""
    pooled = np.asarray(features, np.float64).mean(axis=1)
    return np.sign(pooled) * np.sqrt(np.abs(pooled))


def fit_statistics(vectors, shrinkage=DEFAULT_SHRINKAGE):
    """(mean (C,), whitening W (C, C)) of (N, C) vectors, W W^T the inverse shrunk covariance."""
    vectors = np.asarray(vectors, np.float64)
    mean = vectors.mean(axis=0)
    centred = vectors - mean
    covariance = centred.T @ centred / max(len(vectors) - 1, 1)
    channels = covariance.shape[0]
    scale = np.trace(covariance) / channels
    if not scale > 0:
        scale = 1.0  # every vector alike: any direction away from them is far
    shrunk = (1.0 - shrinkage) * covariance + shrinkage * scale * np.eye(channels)
    # P = shrunk^-1 = L L^T (Cholesky), so v^T P v = |L^T v|^2 = |v L|^2.
    whitening = np.linalg.cholesky(np.linalg.inv(shrunk))
    return mean, whitening


def squared_distances(vectors, mean, whitening):
    """|(v - mean) W|^2 / C per row of (N, C) `vectors`."""
    projected = (np.asarray(vectors, np.float64) - mean) @ whitening
    return np.sum(projected**2, axis=1) / len(mean)


def fit_familiarity(
    train_vectors,
    validation_vectors=None,
    quantile=DEFAULT_QUANTILE,
    shrinkage=DEFAULT_SHRINKAGE,
    folds=FOLDS,
):
    """The familiarity statistics of training images' pooled vectors (`pooled_vectors`).

    The threshold is the `quantile` of held-out distances: each training image's under
    statistics fitted on the other folds, and each validation image's under the final ones.

    Args:
        train_vectors: (N, C) array. N must be larger than `folds`.
        validation_vectors: (M, C) array or None. Defaults to None.
        quantile: float in (0, 1]. Defaults to DEFAULT_QUANTILE.
        shrinkage: float in (0, 1]. Defaults to DEFAULT_SHRINKAGE.
        folds: int. Defaults to FOLDS.

    Returns:
        dict: mean (C,), whitening (C, C), threshold (float), quantile (float), images
        (int, how many distances the threshold was read from).
    """
    train_vectors = np.asarray(train_vectors, np.float64)
    if train_vectors.ndim != 2 or len(train_vectors) <= folds:
        raise ValueError(
            f"familiarity needs more than {folds} training images' vectors (N, C); "
            f"got shape {train_vectors.shape}"
        )
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1]; got {quantile}")
    if not 0.0 < shrinkage <= 1.0:
        raise ValueError(f"shrinkage must be in (0, 1]; got {shrinkage}")
    fold = np.arange(len(train_vectors)) % folds
    held_out = np.zeros(len(train_vectors))
    for k in range(folds):
        mean, whitening = fit_statistics(train_vectors[fold != k], shrinkage)
        held_out[fold == k] = squared_distances(train_vectors[fold == k], mean, whitening)
    mean, whitening = fit_statistics(train_vectors, shrinkage)
    scores = [held_out]
    if validation_vectors is not None and len(validation_vectors):
        scores.append(squared_distances(validation_vectors, mean, whitening))
    scores = np.concatenate(scores)
    threshold = float(np.quantile(scores, quantile))
    return {
        "mean": mean,
        "whitening": whitening,
        "threshold": max(threshold, np.finfo(np.float32).tiny),
        "quantile": float(quantile),
        "images": len(scores),
    }


@keras.saving.register_keras_serializable(package="keras_saat")
class FeatureFamiliarity(keras.layers.Layer):
    """Novelty of images from their backbone features: d2 / threshold.

    Input (B, L, C) backbone features; output (B,) float32 novelty, above 1 for an
    unfamiliar image, NaN until fitted (`assign`).

    Args:
        channels: int. C, the backbone's feature channels.
    """

    def __init__(self, channels, **kwargs):
        kwargs.setdefault("dtype", "float32")  # statistics and distances in float32 always
        super().__init__(**kwargs)
        self.channels = int(channels)
        self.mean = self.add_weight(
            shape=(self.channels,), initializer="zeros", trainable=False, name="mean"
        )
        self.whitening = self.add_weight(
            shape=(self.channels, self.channels),
            initializer="identity",
            trainable=False,
            name="whitening",
        )
        self.threshold = self.add_weight(
            shape=(), initializer="ones", trainable=False, name="threshold"
        )
        self.calibrated = self.add_weight(
            shape=(), initializer="zeros", trainable=False, name="calibrated"
        )
        # The share of held-out familiar images the threshold leaves unflagged (for reports).
        self.quantile = self.add_weight(
            shape=(), initializer="zeros", trainable=False, name="quantile"
        )
        self.built = True

    @property
    def is_calibrated(self):
        """Whether the statistics were fitted (here or in the file this layer loaded)."""
        return bool(self.calibrated.numpy() > 0)

    def assign(self, statistics):
        """Sets the statistics `fit_familiarity` returns."""
        self.mean.assign(np.asarray(statistics["mean"], np.float32))
        self.whitening.assign(np.asarray(statistics["whitening"], np.float32))
        self.threshold.assign(np.float32(statistics["threshold"]))
        self.quantile.assign(np.float32(statistics["quantile"]))
        self.calibrated.assign(np.float32(1.0))

    def call(self, features):
        features = ops.cast(features, "float32")
        vectors = signed_sqrt(ops.mean(features, axis=1))  # (B, C)
        projected = ops.matmul(vectors - self.mean[None], self.whitening)  # (B, C)
        distance = ops.sum(projected * projected, axis=1) / float(self.channels)  # (B,)
        novelty = distance / self.threshold
        return ops.where(self.calibrated > 0, novelty, float("nan"))

    def load_own_variables(self, store):
        """Reads the statistics, or leaves the layer unfitted where the file has none."""
        if len(store.keys()) == 0:
            return
        super().load_own_variables(store)

    def compute_output_shape(self, input_shape):
        return (input_shape[0],)

    def get_config(self):
        config = super().get_config()
        config.update(channels=self.channels)
        return config
