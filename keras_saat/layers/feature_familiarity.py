"""FeatureFamiliarity: how far an image's backbone features lie from the training images'.

A captioner names what it learnt to name, whatever it is shown; this layer flags when
the picture is unlike the training pictures. It mean-pools the annotation grid, takes
each channel's signed square root (Perronnin et al., ECCV 2010), and measures two
things: the squared Mahalanobis distance from the training mean under a shrunk
covariance, and how far the vector lies along Fisher's discriminant from the training
vectors towards pictures with natural images' statistics and nothing of the world
(`keras_saat.data.unlike_pictures`):

    v = sign(m) sqrt(|m|),  m = mean_i f_i                     (C,)
    d2 = |(v - mu) W|^2 / C,  W W^T = ((1 - s) S + s tr(S)/C I)^-1
    a = (v - mu) . w,         w ~ (S + S_unlike + shrinkage)^-1 (mu_unlike - mu)
    novelty = max(d2 / threshold, a / direction_threshold)

A photograph's features can sit inside the spread of a varied training world (a sheet
photographed on a wooden table) and still lie on the side of it that natural pictures
lie on; the distance alone misses those. Both thresholds sit at one quantile of held-out
familiar images, chosen so that `quantile` of them keep novelty at or below 1. The
statistics are non-trainable weights, so every saved and exported form carries them; a
layer never fitted answers NaN.
"""

import keras
import numpy as np
from keras import ops

# The share of held-out familiar images whose novelty stays at or below 1.
DEFAULT_QUANTILE = 0.99
# How far the covariance is pulled towards a multiple of the identity.
DEFAULT_SHRINKAGE = 0.1
# The discriminant's: its two-class covariance is better estimated, so it is pulled less.
DISCRIMINANT_SHRINKAGE = 0.01
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


def _shrunk_covariance(vectors, shrinkage, mean):
    centred = vectors - mean
    covariance = centred.T @ centred / max(len(vectors) - 1, 1)
    channels = covariance.shape[0]
    scale = np.trace(covariance) / channels
    if not scale > 0:
        scale = 1.0  # every vector alike: any direction away from them is far
    return (1.0 - shrinkage) * covariance + shrinkage * scale * np.eye(channels)


def fit_statistics(vectors, shrinkage=DEFAULT_SHRINKAGE):
    """(mean (C,), whitening W (C, C)) of (N, C) vectors, W W^T the inverse shrunk covariance."""
    vectors = np.asarray(vectors, np.float64)
    mean = vectors.mean(axis=0)
    shrunk = _shrunk_covariance(vectors, shrinkage, mean)
    # P = shrunk^-1 = L L^T (Cholesky), so v^T P v = |L^T v|^2 = |v L|^2.
    whitening = np.linalg.cholesky(np.linalg.inv(shrunk))
    return mean, whitening


def fit_direction(vectors, unlike, shrinkage=DISCRIMINANT_SHRINKAGE):
    """Fisher's unit direction from (N, C) familiar vectors towards (M, C) unlike ones."""
    mean, mean_unlike = vectors.mean(axis=0), unlike.mean(axis=0)
    within = _shrunk_covariance(vectors, shrinkage, mean)
    within += _shrunk_covariance(unlike, shrinkage, mean_unlike)
    direction = np.linalg.solve(within, mean_unlike - mean)
    return direction / max(np.linalg.norm(direction), np.finfo(np.float64).tiny)


def joint_thresholds(distances, scores, quantile):
    """(distance, score) thresholds at one quantile of each, the one under which both
    leave `quantile` of the held-out images (bisection: the kept share grows with it)."""
    low, high = quantile, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        kept = (distances <= np.quantile(distances, middle)) & (
            scores <= np.quantile(scores, middle)
        )
        low, high = (middle, high) if kept.mean() < quantile else (low, middle)
    return float(np.quantile(distances, high)), float(np.quantile(scores, high))


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
    unlike_vectors=None,
):
    """The familiarity statistics of training images' pooled vectors (`pooled_vectors`).

    The thresholds come from held-out images: each training image's distance and score
    under statistics fitted on the other folds, and each validation image's under the
    final ones.

    Args:
        train_vectors: (N, C) array. N must be larger than `folds`.
        validation_vectors: (M, C) array or None. Defaults to None.
        quantile: float in (0, 1]. Defaults to DEFAULT_QUANTILE.
        shrinkage: float in (0, 1]. The distance's. Defaults to DEFAULT_SHRINKAGE.
        folds: int. Defaults to FOLDS.
        unlike_vectors: (K, C) array or None: pictures unlike the world
            (`keras_saat.data.unlike_pictures`) for the discriminant; None measures the
            distance alone. Defaults to None.

    Returns:
        dict: mean (C,), whitening (C, C), threshold (float), direction (C,),
        direction_threshold (float), quantile (float), images (int, how many held-out
        images the thresholds were read from).
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
    unlike = None if unlike_vectors is None else np.asarray(unlike_vectors, np.float64)
    if unlike is not None and len(unlike) < 2:
        unlike = None

    def fitted(vectors):
        mean, whitening = fit_statistics(vectors, shrinkage)
        direction = np.zeros_like(mean) if unlike is None else fit_direction(vectors, unlike)
        return mean, whitening, direction

    def measured(vectors, mean, whitening, direction):
        return squared_distances(vectors, mean, whitening), (vectors - mean) @ direction

    fold = np.arange(len(train_vectors)) % folds
    distances, scores = np.zeros(len(train_vectors)), np.zeros(len(train_vectors))
    for k in range(folds):
        held = fold == k
        statistics = fitted(train_vectors[~held])
        distances[held], scores[held] = measured(train_vectors[held], *statistics)
    mean, whitening, direction = fitted(train_vectors)
    if validation_vectors is not None and len(validation_vectors):
        more = measured(np.asarray(validation_vectors, np.float64), mean, whitening, direction)
        distances, scores = np.concatenate([distances, more[0]]), np.concatenate([scores, more[1]])
    if unlike is None:
        threshold, direction_threshold = float(np.quantile(distances, quantile)), 1.0
    else:
        threshold, direction_threshold = joint_thresholds(distances, scores, quantile)
    tiny = np.finfo(np.float32).tiny
    return {
        "mean": mean,
        "whitening": whitening,
        "threshold": max(threshold, tiny),
        "direction": direction,
        "direction_threshold": max(direction_threshold, tiny),
        "quantile": float(quantile),
        "images": len(distances),
    }


@keras.saving.register_keras_serializable(package="keras_saat")
class FeatureFamiliarity(keras.layers.Layer):
    """Novelty of images from their backbone features: the larger of d2 / threshold and
    a / direction_threshold (the module's docstring).

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
        # Zero until fitted with unlike pictures: the distance alone then decides.
        self.direction = self.add_weight(
            shape=(self.channels,), initializer="zeros", trainable=False, name="direction"
        )
        self.direction_threshold = self.add_weight(
            shape=(), initializer="ones", trainable=False, name="direction_threshold"
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
        self.direction.assign(np.asarray(statistics["direction"], np.float32))
        self.direction_threshold.assign(np.float32(statistics["direction_threshold"]))
        self.calibrated.assign(np.float32(1.0))

    def call(self, features):
        features = ops.cast(features, "float32")
        vectors = signed_sqrt(ops.mean(features, axis=1))  # (B, C)
        centred = vectors - self.mean[None]
        projected = ops.matmul(centred, self.whitening)  # (B, C)
        distance = ops.sum(projected * projected, axis=1) / float(self.channels)  # (B,)
        along = ops.sum(centred * self.direction[None], axis=1)  # (B,)
        novelty = ops.maximum(distance / self.threshold, along / self.direction_threshold)
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
