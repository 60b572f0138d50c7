"""Captioning and feature extraction as Apache Beam pipelines: one machine's cores, or
Dataflow, Flink, Spark.

    pip install "keras-saat[beam]"
    keras-saat export --workdir runs/demo --out models/captioner
    keras-saat caption --saved-model models/captioner photos/ --out captions/ --runner local

    import apache_beam as beam
    from keras_saat.beam import CaptionImages
    with beam.Pipeline() as p:
        rows = p | beam.Create(["photos/*.jpg"]) | CaptionImages("models/captioner/1")

`keras-saat extract-features --config C --workdir W --runner local` writes the feature
cache `train` reads (`extract_features_beam`, `ExtractFeatures`, `EncoderHandler`).

The captioning pipeline runs the SavedModel's `serving_default` signature (`SavedModelHandler`),
so workers need TensorFlow but not this package's model code. Nothing here imports
apache_beam until it is used (`require_beam` names the extra when it is missing).
"""

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
    """Imports apache_beam, or raises one line naming the extra to install.

    Raises:
        KerasSaatError: apache_beam cannot be imported.
    """
    try:
        import apache_beam
    except ImportError:
        raise KerasSaatError(INSTALL_HINT) from None
    return apache_beam


__getattr__ = lazy_getattr("keras_saat.beam", _EXPORTS, globals())
