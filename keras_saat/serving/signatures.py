"""An exported model's signature and metadata file names; imports nothing, so clients
stay light."""

# The signature that takes encoded image bytes (a SavedModel's default, the one TF
# Serving calls when a request names none), and a .tflite file's only signature.
DEFAULT_SIGNATURE = "serving_default"
PIXELS_SIGNATURE = "serving_pixels"  # a SavedModel's second signature: float pixels
METADATA_FILE = "keras_saat.json"  # in a SavedModel's assets.extra/: what was exported, how
