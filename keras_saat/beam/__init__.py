"""Captioning and feature extraction as Apache Beam pipelines (one machine's cores, or
Dataflow, Flink, Spark). Captioning runs an exported SavedModel, so workers need
TensorFlow but not the model code; apache_beam is imported only when used."""

from keras_saat._lazy import lazy_getattr
from keras_saat.errors import KerasSaatError

_EXPORTS = {
    "SavedModelHandler": "keras_saat.beam.model_handler",
    "CaptionImages": "keras_saat.beam.captioning",
    "CaptionKeyedImages": "keras_saat.beam.captioning",
    "caption_row": "keras_saat.beam.captioning",
    "EncoderHandler": "keras_saat.beam.extraction",
    "ExtractFeatures": "keras_saat.beam.extraction",
    "extract_features_beam": "keras_saat.beam.extraction_runs",
}

__all__ = sorted([*_EXPORTS, "require_beam"])

INSTALL_HINT = 'apache-beam is not installed; pip install "keras-saat[beam]"'


def require_beam():
    """Imports apache_beam, or raises a KerasSaatError naming the extra to install."""
    try:
        import apache_beam
    except ImportError:
        raise KerasSaatError(INSTALL_HINT) from None
    return apache_beam


__getattr__ = lazy_getattr("keras_saat.beam", _EXPORTS, globals())
