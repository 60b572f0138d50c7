"""The exports' `novelty` and `familiar` outputs and what their metadata says of them."""

import tensorflow as tf


def familiarity_outputs(novelty, valid=None):
    """{"novelty", "familiar"} from the decoded novelty (B,): familiar is novelty <= 1,
    true where novelty is NaN (a model never calibrated). Where `valid` (B,) is false (an
    image that could not be read), novelty is 0 and familiar false, as log_prob is 0."""
    if valid is not None:
        novelty = tf.where(valid, novelty, 0.0)
    familiar = tf.logical_not(novelty > 1.0)
    if valid is not None:
        familiar = tf.logical_and(valid, familiar)
    return {"novelty": novelty, "familiar": familiar}


def warn_uncalibrated(model, log=print):
    """Logs that a model's familiarity was never fitted (its novelty output is NaN)."""
    if not model.familiarity_calibrated:
        log(
            "warning: this model's familiarity was never calibrated: its novelty output is "
            "NaN and familiar is true for every image (Captioner.calibrate_familiarity)"
        )


def familiarity_metadata(model):
    """What the novelty and familiar outputs mean, for the export's metadata file."""
    calibrated = model.familiarity_calibrated
    return {
        "calibrated": calibrated,
        "quantile": round(float(model.familiarity.quantile.numpy()), 6) if calibrated else None,
        "novelty": "the larger of the image's pooled backbone features' squared Mahalanobis "
        "distance from the training images' and their projection on a discriminant towards "
        "pictures with natural images' statistics, each over its threshold; `quantile` of "
        "held-out training and validation images stay at or below 1; above 1: unlike the "
        "training pictures; NaN when never calibrated; 0 for an image that could not be read",
        "familiar": "novelty <= 1 (true when never calibrated; false for an image that "
        "could not be read)",
    }
