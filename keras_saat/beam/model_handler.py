"""SavedModelHandler: Beam's RunInference calls a SavedModel signature as TF Serving
does (Beam's TFModelHandlerTensor loads through tf.keras, which Keras 3 refuses).
`ImageFile` inputs are read just before their model call."""

from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from keras_saat.config import DecodeConfig
from keras_saat.errors import KerasSaatError
from keras_saat.images.image_files import MAX_FILE_BYTES, batches_by_bytes, encoded_images
from keras_saat.serving.signatures import DEFAULT_SIGNATURE

CAPTION_OUTPUTS = ("caption", "log_prob", "novelty", "familiar", "valid", "error")
BATCH_SIZE = DecodeConfig.batch_size  # images per model call: the decode batch of `caption`


class SignatureCall:
    """`signature` of the SavedModel folder `path` as a plain callable (Beam's large_model
    proxy forwards only calls): list of inputs (its `input_key`) -> dict of NumPy arrays
    (its `output_keys`)."""

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
        # An export that predates an output (novelty, familiar) answers None for it.
        return {key: outputs[key].numpy() if key in outputs else None for key in self._output_keys}


def is_remote(path):
    """Whether `path` names a Beam file system other than the local one (gs://, s3://)."""
    return "://" in str(path)


def read_remote(path, limit=MAX_FILE_BYTES):
    """The bytes of a file on a Beam file system; ValueError when it is over `limit`."""
    with FileSystems.open(path, compression_type="uncompressed") as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise ValueError(
            f"the file is more than {limit} bytes, over the {limit // (1 << 20)} MiB read "
            "from one image file; give a smaller image"
        )
    return data


class ImageFile:
    """An image file `path` a handler reads when its batch is run (local, or a Beam file
    system)."""

    def __init__(self, path):
        self.path = str(path)

    def read(self):
        """(bytes, error): the file's bytes and "", or b"" and why it cannot be read (as
        `keras-saat caption` says it)."""
        if not is_remote(self.path):
            _, data, error = next(encoded_images([self.path]))
            return data, error
        try:
            return read_remote(self.path), ""
        except Exception as err:  # any file system's failure is this image's row
            return b"", " ".join(f"cannot read the file: {err}".split())[:300]


def fixed_batches(batch_size, large_model):
    """A ModelHandler's batching arguments: batches of exactly `batch_size` (but the last;
    Beam's adaptive batching would start at 1) and `large_model` (one model a machine)."""
    size = int(batch_size)
    if size < 1:
        raise KerasSaatError(f"batch_size must be at least 1; got {batch_size}")
    return {"min_batch_size": size, "max_batch_size": size, "large_model": bool(large_model)}


class SavedModelHandler(ModelHandler):
    """Runs one signature of a SavedModel over batches of inputs (image bytes by default);
    each input's inference is a dict of its outputs.

    Args:
        path: str. A SavedModel folder (local, gs://, ... as the workers see it).
        signature: str. Defaults to "serving_default" (encoded image bytes).
        input_key: str. The signature's input. Defaults to "image_bytes".
        output_keys: tuple of str. Defaults to `CAPTION_OUTPUTS`.
        batch_size: int. Inputs per call (`fixed_batches`). Defaults to BATCH_SIZE.
        large_model: bool. One copy of the model per machine, shared by its worker
            processes, instead of one per process. Defaults to False.
    """

    def __init__(
        self,
        path,
        signature=DEFAULT_SIGNATURE,
        input_key="image_bytes",
        output_keys=CAPTION_OUTPUTS,
        batch_size=BATCH_SIZE,
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
        results = [None] * len(batch)
        reads = self._read(batch, results)
        for call in batches_by_bytes(reads, None, size=lambda item: len(item[1])):
            outputs = model([data for _, data in call])
            for row, (index, _) in enumerate(call):
                results[index] = {key: values[row] for key, values in outputs.items()}
        # The example is left out: the caller keys its inputs (KeyedModelHandler).
        return [PredictionResult(None, inference) for inference in results]

    def _read(self, batch, results):
        """(index, bytes) of each input, an ImageFile read one at a time; one that cannot
        be read gets its result here, as the signature answers a refused image."""
        for index, item in enumerate(batch):
            if not isinstance(item, ImageFile):
                yield index, item
                continue
            data, error = item.read()
            if not error:
                yield index, data
                continue
            unread = {"caption": b"", "log_prob": 0.0, "novelty": 0.0, "familiar": False,
                      "valid": False, "error": error.encode()}  # fmt: skip
            results[index] = {key: unread.get(key) for key in self._output_keys}

    def get_num_bytes(self, batch):
        return sum(len(x) if isinstance(x, (bytes, str)) else 8 for x in batch)

    def get_metrics_namespace(self):
        return "keras_saat"
