"""SavedModelHandler: Beam's RunInference calls a SavedModel signature, unchanged.

Beam's own TFModelHandlerTensor loads with tf.keras (Keras 3 refuses a SavedModel
folder there) and calls the model object; this handler loads with
`tf.saved_model.load` and calls a named signature, so an export of `keras-saat export`
runs as TF Serving runs it. It holds only strings and numbers, so it pickles into the
pipeline; TensorFlow is imported on the worker, when the model loads.
"""

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from keras_saat.errors import KerasSaatError
from keras_saat.serving.signatures import DEFAULT_SIGNATURE

CAPTION_OUTPUTS = ("caption", "log_prob", "valid", "error")


class SignatureCall:
    """A loaded signature as a plain callable: list of inputs -> dict of NumPy arrays.

    Beam's large_model mode serves the model from one process through a proxy that
    forwards calls but not attributes, so the call is the whole interface.

    Args:
        path: str. The SavedModel folder (holds saved_model.pb).
        signature: str. The signature's name.
        input_key: str. The signature's input name.
        output_keys: tuple of str. The outputs returned.
    """

    def __init__(self, path, signature, input_key, output_keys):
        import tensorflow as tf

        self._tf = tf
        self._loaded = tf.saved_model.load(path)  # keeps the signature's variables alive
        if signature not in self._loaded.signatures:
            names = ", ".join(sorted(self._loaded.signatures))
            raise KerasSaatError(f"{path} has no signature {signature!r}; it has {names}")
        self._function = self._loaded.signatures[signature]
        self._input_key = input_key
        self._output_keys = tuple(output_keys)

    def __call__(self, inputs):
        outputs = self._function(**{self._input_key: self._tf.constant(inputs)})
        return {key: outputs[key].numpy() for key in self._output_keys}


def fixed_batches(batch_size, large_model):
    """A ModelHandler's batching arguments: batches of exactly `batch_size` (but the last;
    Beam's adaptive batching would start at 1) and `large_model` (one model a machine).

    Raises:
        KerasSaatError: batch_size under 1.
    """
    if int(batch_size) < 1:
        raise KerasSaatError(f"batch_size must be at least 1; got {batch_size}")
    size = int(batch_size)
    return {"min_batch_size": size, "max_batch_size": size, "large_model": bool(large_model)}


class SavedModelHandler(ModelHandler):
    """Runs one signature of a SavedModel over batches of inputs (image bytes by default).

    Each input's inference is a dict of its outputs (one row of each output array).

    Args:
        path: str. A SavedModel folder (local, gs://, ... as the workers see it).
        signature: str. Defaults to "serving_default" (encoded image bytes).
        input_key: str. The signature's input. Defaults to "image_bytes".
        output_keys: tuple of str. Defaults to caption, log_prob, valid, error.
        batch_size: int. Inputs per call; Beam's batches are exactly this size (but the
            last), since its adaptive batching would start at 1. Defaults to 32.
        large_model: bool. One copy of the model per machine, shared by its worker
            processes, instead of one per process. Defaults to False.
    """

    def __init__(
        self,
        path,
        signature=DEFAULT_SIGNATURE,
        input_key="image_bytes",
        output_keys=CAPTION_OUTPUTS,
        batch_size=32,
        large_model=False,
    ):
        super().__init__(**fixed_batches(batch_size, large_model))
        self._path = str(path)
        self._signature = str(signature)
        self._input_key = str(input_key)
        self._output_keys = tuple(str(k) for k in output_keys)

    def load_model(self):
        return SignatureCall(self._path, self._signature, self._input_key, self._output_keys)

    def run_inference(self, batch, model, inference_args=None):
        outputs = model(list(batch))
        # The example is left out: the caller keys its inputs (KeyedModelHandler), and
        # image bytes need not travel further down the pipeline.
        return [
            PredictionResult(None, {key: values[i] for key, values in outputs.items()})
            for i in range(len(batch))
        ]

    def get_num_bytes(self, batch):
        return sum(len(x) if isinstance(x, (bytes, str)) else 8 for x in batch)

    def get_metrics_namespace(self):
        return "keras_saat"
