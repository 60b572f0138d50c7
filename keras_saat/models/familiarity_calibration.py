"""FamiliarityCalibration: fits a Captioner's familiarity statistics (each caption's
novelty score) from its training images or their backbone features."""

import contextlib
import functools

import numpy as np

from keras_saat.data.unlike_pictures import unlike_pictures
from keras_saat.errors import KerasSaatError
from keras_saat.layers.feature_familiarity import (
    DEFAULT_QUANTILE,
    DEFAULT_SHRINKAGE,
    fit_familiarity,
    pooled_vectors,
)

# Bounds the (N, C) float64 vectors held at once.
MAX_IMAGES = 20000
BATCH_SIZE = 64
# Pictures unlike any world the discriminant is fitted against: more change its direction
# little, fewer leave it noisy.
UNLIKE_PICTURES = 600


@functools.lru_cache(maxsize=1)
def _unlike(count, size):
    # Rendered once a process: every calibration at one image size reads the same pictures.
    pictures = unlike_pictures(count, size)
    pictures.flags.writeable = False
    return pictures


class FamiliarityCalibration:
    """`calibrate_familiarity`, `familiarity_vectors` and `familiarity_calibrated` of a
    model with `familiarity` (a FeatureFamiliarity), `encoder` and `preprocessor()` (a
    Captioner)."""

    @property
    def familiarity_calibrated(self):
        """Whether the familiarity statistics were fitted; an unfitted model's novelty is
        NaN and every caption reads familiar."""
        return self.familiarity.is_calibrated

    def familiarity_vectors(self, images=None, features=None, batch_size=None, limit=None):
        """The pooled vectors the familiarity statistics describe, (N, C) float64.

        Args:
            images: caption records (`read_captions(path).train`), image paths or bytes,
                or pixels (N, H, W, 3) in [0, 255]. Unreadable images are left out.
            features: (N, L, C) backbone features, or an iterable of such batches (or of
                a feature cache's {"features": ...} batches), instead of images.
            batch_size: int or None. Images encoded at once. Defaults to None (64).
            limit: int or None. Read at most this many images. Defaults to None (all).
        """
        if (images is None) == (features is None):
            raise KerasSaatError("familiarity_vectors takes exactly one of images= or features=")
        if features is None:
            features = self._encoded_batches(images, int(batch_size or BATCH_SIZE))
        elif hasattr(features, "shape") and len(features.shape) == 3:  # one (N, L, C) array
            features = [features]
        vectors, count = [], 0
        batches = iter(features)
        closing = contextlib.closing if hasattr(batches, "close") else contextlib.nullcontext
        with closing(batches):
            for batch in batches:
                if isinstance(batch, dict):  # a feature cache's {"position", "features"}
                    batch = batch["features"]
                batch = np.asarray(batch)
                if batch.ndim != 3 or batch.shape[-1] != self.familiarity.channels:
                    raise KerasSaatError(
                        "familiarity takes backbone features (N, L, "
                        f"{self.familiarity.channels}); got a batch of shape {batch.shape}"
                    )
                if limit is not None:
                    batch = batch[: max(int(limit) - count, 0)]
                vectors.append(pooled_vectors(batch))
                count += len(batch)
                if limit is not None and count >= limit:
                    break
        if not vectors:
            return np.zeros((0, self.familiarity.channels))
        return np.concatenate(vectors)

    def _encoded_batches(self, images, batch_size):
        if isinstance(images, (list, tuple)) and images and hasattr(images[0], "captions"):
            images = [r.path for r in images]  # caption records
        encode = self.encoder.compiled()
        with contextlib.closing(self.preprocessor().rows(images, batch_size)) as batches:
            for batch in batches:
                valid = np.asarray(batch["valid"], bool)
                if valid.any():  # every row encoded: one batch shape, one compiled call
                    yield np.asarray(encode(np.asarray(batch["pixels"], np.float32)))[valid]

    def calibrate_familiarity(
        self,
        images=None,
        features=None,
        validation=None,
        quantile=DEFAULT_QUANTILE,
        shrinkage=DEFAULT_SHRINKAGE,
        batch_size=None,
        max_images=MAX_IMAGES,
        unlike=UNLIKE_PICTURES,
    ):
        """Fits the familiarity statistics from the training images (or their features);
        `keras-saat train` and `fit` on records call it, a `tf.data` fit does not.

        Args:
            images: the training images: caption records, paths, bytes or pixels
                (`familiarity_vectors`).
            features: their backbone features instead: (N, L, C) or an iterable of batches.
            validation: validation images of the same kind (records, paths, pixels, or
                features when `features` is given), or None. Their distances join the
                threshold's sample. Defaults to None.
            quantile: float. The share of held-out familiar images left unflagged.
                Defaults to DEFAULT_QUANTILE (0.99).
            shrinkage: float. How far the covariance is pulled towards a multiple of
                the identity. Defaults to 0.1.
            batch_size: int or None. Images encoded at once. Defaults to None (64).
            max_images: int. Training images read at most. Defaults to MAX_IMAGES.
            unlike: int. Pictures unlike any world (`keras_saat.data.unlike_pictures`)
                the discriminant direction is fitted against; 0 measures the distance
                alone. Defaults to UNLIKE_PICTURES.

        Returns:
            dict: images (training images fitted), validation_images, unlike_pictures,
            threshold (the squared distance that novelty 1 stands for),
            direction_threshold, quantile.
        """
        train = self.familiarity_vectors(images, features, batch_size, limit=max_images)
        held = None
        if validation is not None:
            kind = "images" if features is None else "features"
            held = self.familiarity_vectors(
                **{kind: validation}, batch_size=batch_size, limit=max_images
            )
        unlike_vectors = None
        if unlike:
            size = self.encoder.image_size
            unlike_vectors = self.familiarity_vectors(_unlike(int(unlike), size), None, batch_size)
        try:
            statistics = fit_familiarity(
                train, held, quantile, shrinkage, unlike_vectors=unlike_vectors
            )
        except ValueError as err:
            raise KerasSaatError(f"cannot calibrate familiarity: {err}") from None
        self.familiarity.assign(statistics)
        return {
            "images": len(train),
            "validation_images": 0 if held is None else len(held),
            "unlike_pictures": 0 if unlike_vectors is None else len(unlike_vectors),
            "threshold": statistics["threshold"],
            "direction_threshold": statistics["direction_threshold"],
            "quantile": float(quantile),
        }
