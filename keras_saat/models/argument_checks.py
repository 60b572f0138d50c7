"""The Captioner's argument checks: a value a config, a preset or a caller got wrong is
named with what would be right, before any weight is built."""

from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import RESIZE_MODES

REINFORCE_BASELINES = ("moving_average", "expected_context")


def check_captioner_arguments(
    reinforce_baseline, beam_size, resize, max_pixels, location_embedding
):
    """Raises KerasSaatError for the first argument out of its range or choices."""
    if reinforce_baseline not in REINFORCE_BASELINES:
        raise KerasSaatError(
            f"reinforce_baseline must be moving_average or expected_context; got {reinforce_baseline!r}"
        )
    if int(beam_size) < 1:
        raise KerasSaatError(f"beam_size must be at least 1; got {beam_size}")
    if resize not in RESIZE_MODES:
        raise KerasSaatError(f"resize must be one of {', '.join(RESIZE_MODES)}; got {resize!r}")
    if int(max_pixels) < 1:
        raise KerasSaatError(f"max_pixels must be at least 1; got {max_pixels}")
    if not isinstance(location_embedding, bool):
        raise KerasSaatError(f"location_embedding is true or false; got {location_embedding!r:.40}")
