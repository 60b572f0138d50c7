"""The names an exported model promises the code that calls it: its signatures and its
metadata file. The export writes them and the servers, clients and Beam handler ask
for them; this module imports nothing, so the clients stay light."""

# The signature that takes encoded image bytes (a SavedModel's default, the one TF
# Serving calls when a request names none), and a .tflite file's only signature.
DEFAULT_SIGNATURE = "serving_default"
PIXELS_SIGNATURE = "serving_pixels"  # a SavedModel's second signature: float pixels
METADATA_FILE = "keras_saat.json"  # in a SavedModel's assets.extra/: what was exported, how
