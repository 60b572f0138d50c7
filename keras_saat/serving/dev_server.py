"""DevServer: TF Serving's REST API (and gRPC Predict) for development and tests on
machines without TF Serving. It loads the SavedModel alone, without Keras."""

import json
import re
import threading
from pathlib import Path

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import whole_number
from keras_saat.serving.answers import BadRequest, NotFound, Page, json_value
from keras_saat.serving.dev_grpc import grpc_server
from keras_saat.serving.dev_http import RequestGate
from keras_saat.serving.request_checks import (
    MAX_BATCH,
    check_batch,
    check_json_size,
    check_names,
    expected_shape,
    proto_arrays,
    rest_arrays,
)
from keras_saat.serving.signatures import DEFAULT_SIGNATURE, METADATA_FILE

PAGE = Path(__file__).with_name("page.html")
_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d{1,18})|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<verb>:predict|:classify|:regress)|(?P<metadata>/metadata))?/?$"
)


def latest_version(model_base):
    """The highest numeric version folder with a saved_model.pb (TF Serving's default policy)."""
    base = Path(model_base)
    if not base.is_dir():
        raise KerasSaatError(f"model base {base} is not a folder; run `keras-saat export` first")
    named = ((whole_number(p.name), p) for p in base.iterdir())
    versions = [v for v, p in named if v is not None and (p / "saved_model.pb").is_file()]
    if not versions:
        raise KerasSaatError(
            f"{base} holds no version folder (BASE/<number>/saved_model.pb); run `keras-saat export`"
        )
    return max(versions)


class DevServer(RequestGate):
    """Serves the latest version under a TF Serving model base over REST (and gRPC).

    The part of TF Serving's API that keras-saat's model uses:

        GET  /                                        a page: captions and attention
        GET  /v1/models/NAME[/versions/N]             model status
        GET  /v1/models/NAME[/versions/N]/metadata    signatures
        POST /v1/models/NAME[/versions/N]:predict     row ("instances") or columnar ("inputs")
        gRPC tensorflow.serving.PredictionService/Predict and GetModelMetadata

    Args:
        model_base: path. TF Serving's model base path: BASE/<version>/saved_model.pb.
        name: str. The model name in request paths. Defaults to "keras_saat".
        host: str. Address to bind. Defaults to "127.0.0.1".
        port: int. REST port (0 = any free port). Defaults to 8501.
        grpc_port: int or None. gRPC port (0 = any free port; None = no gRPC). Defaults to None.
        version: int or None. The version to serve; None = the highest. Defaults to None.
        log: callable. Receives the warm-up's line. Defaults to print.
        max_inflight: int. Requests run by the model at once, REST and gRPC together.
            Defaults to 4.
        max_batch: int. Images (instances) in one request. Defaults to MAX_BATCH.
        max_connections: int. REST connections served at once. Defaults to 32.
        read_timeout: float. Seconds a REST request has to arrive whole. Defaults to 30.

    Example:
        ```python
        from keras_saat.serving import DevServer

        server = DevServer("runs/demo/export", port=8501).start()  # BASE/<version>/saved_model.pb
        print(server.url)  # POST {url}/v1/models/keras_saat:predict, or open it in a browser
        server.stop()
        ```
    """

    def __init__(
        self, model_base, name="keras_saat", host="127.0.0.1", port=8501, grpc_port=None,
        version=None, log=print, max_inflight=4, max_batch=MAX_BATCH, max_connections=32,
        read_timeout=30.0,
    ):  # fmt: skip
        from keras_saat.registration import forgo

        forgo()  # a SavedModel needs no Keras classes: keep the model code out
        import tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2

        self.name = name
        self.version = int(version) if version is not None else latest_version(model_base)
        self.path = Path(model_base) / str(self.version)
        if not (self.path / "saved_model.pb").is_file():
            raise KerasSaatError(f"{self.path} has no saved_model.pb")
        proto = saved_model_pb2.SavedModel.FromString((self.path / "saved_model.pb").read_bytes())
        self.signature_defs = {
            key: value
            for key, value in proto.meta_graphs[0].signature_def.items()
            if not key.startswith("__")
        }
        self.loaded = tf.saved_model.load(str(self.path))
        self.functions = {key: self.loaded.signatures[key] for key in self.signature_defs}
        metadata = self.path / "assets.extra" / METADATA_FILE
        saved = json.loads(metadata.read_text()) if metadata.is_file() else {}
        self.page_settings = {
            "model": self.name,
            "resize": saved.get("resize", "crop"),
            "image_size": str(saved.get("image_size", "")),
        }
        super().__init__(host, port, max_inflight, max_connections, read_timeout)
        self.grpc_port = grpc_port
        self.max_batch = max(int(max_batch), 1)
        self._slots = threading.BoundedSemaphore(self.max_inflight)
        self.inflight = self.peak_inflight = 0  # requests run by the model; the most at once
        self._grpc = None
        replayed = self.warmup()
        if replayed:  # the first requests are then answered at full speed
            log(f"warmed up: {replayed} recorded requests replayed (assets.extra)")

    def input_specs(self, signature):
        if signature not in self.functions:
            raise BadRequest(
                f'Serving signature name: "{signature}" not found in signature def; '
                f"signatures: {', '.join(sorted(self.functions))}"
            )
        return self.functions[signature].structured_input_signature[1]

    def check_batch(self, count):
        """BadRequest when a request holds more than `max_batch` instances."""
        check_batch(count, self.max_batch)

    def arrays_from_protos(self, signature, protos):
        """A PredictRequest's inputs as NumPy arrays, checked on the wire (`proto_arrays`)."""
        return proto_arrays(signature, protos, self.input_specs, self.max_batch)

    def run(self, signature, inputs):
        """Runs a signature on a dict of NumPy arrays (or JSON lists already checked by
        `json_shape`); returns a dict of NumPy arrays."""
        import tensorflow as tf

        specs = check_names(signature, self.input_specs(signature), inputs)
        for key in specs:
            value = inputs[key]
            # len() of a list: np.shape would build an array of the whole of it.
            self.check_batch(len(value) if isinstance(value, list) else (np.shape(value) or [1])[0])
        tensors = {}
        for key, spec in specs.items():
            value = inputs[key]
            try:
                tensor = tf.convert_to_tensor(value, spec.dtype)
            except (ValueError, TypeError) as err:
                raise BadRequest(
                    f"input {key}: cannot make a {spec.dtype.name} tensor: {err}"
                ) from None
            if not spec.shape.is_compatible_with(tensor.shape):
                raise BadRequest(
                    f"input {key} has shape {tensor.shape.as_list()}; the signature expects "
                    f"{expected_shape(spec)}"
                )
            tensors[key] = tensor
        with self._slots:  # REST and gRPC share the model's slots
            with self._count_lock:
                self.inflight += 1
                self.peak_inflight = max(self.peak_inflight, self.inflight)
            try:
                outputs = self.functions[signature](**tensors)
                return {key: value.numpy() for key, value in outputs.items()}
            except tf.errors.InvalidArgumentError as err:
                raise BadRequest(err.message.splitlines()[0]) from None
            finally:
                with self._count_lock:
                    self.inflight -= 1

    def warmup(self):
        """Replays assets.extra/tf_serving_warmup_requests, as TF Serving does at load."""
        import tensorflow as tf

        path = self.path / "assets.extra" / "tf_serving_warmup_requests"
        if not path.is_file():
            return 0
        from tensorflow_serving.apis import prediction_log_pb2

        count = 0
        for record in tf.data.TFRecordDataset(str(path)):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            request = log.predict_log.request
            signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
            self.run(signature, self.arrays_from_protos(signature, request.inputs))
            count += 1
        return count

    def status(self):
        ok = {"error_code": "OK", "error_message": ""}
        version = {"version": str(self.version), "state": "AVAILABLE", "status": ok}
        return {"model_version_status": [version]}

    def metadata(self):
        from google.protobuf import json_format

        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {
                "signature_def": {
                    "signature_def": {
                        key: json_format.MessageToDict(value, preserving_proto_field_name=True)
                        for key, value in self.signature_defs.items()
                    },
                    "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
                }
            },
        }

    def rest_predict(self, body):
        """A `:predict` request body (dict) -> the response body (dict)."""
        signature, arrays = rest_arrays(body, self.input_specs, self.max_batch)
        outputs = self.run(signature, arrays)
        if "inputs" in body:
            return {"outputs": {key: json_value(value) for key, value in outputs.items()}}
        batch = len(next(iter(outputs.values())))
        rows = [{key: json_value(value[i]) for key, value in outputs.items()} for i in range(batch)]
        return {"predictions": rows}

    def route(self, method, path, body):
        """(status, response dict) for one HTTP request."""
        if method == "GET" and path.split("?")[0] in ("/", "/index.html"):
            return self.page()
        match = _PATH.match(path.split("?")[0])
        if not match:
            raise NotFound(f"malformed request: {method} {path}")
        if match["name"] != self.name:
            raise NotFound(f"Servable not found for request: Latest({match['name']})")
        if match["version"] is not None and int(match["version"]) != self.version:
            raise NotFound(
                f"Servable not found for request: Specific({self.name}, {match['version']})"
            )
        if match["label"] is not None:
            raise NotFound(f"no version label {match['label']!r}: the dev server has no labels")
        if method == "GET" and match["verb"] is None:
            return self.metadata() if match["metadata"] else self.status()
        if method == "POST" and match["verb"] == ":predict":
            check_json_size(body, self.max_batch)
            try:
                request = json.loads(body)
            except RecursionError:
                raise BadRequest("the request body nests JSON too deeply") from None
            except (ValueError, UnicodeDecodeError) as err:
                raise BadRequest(f"the request body is not valid JSON: {err}") from None
            return self.rest_predict(request)
        if method == "POST" and match["verb"]:
            raise BadRequest(f"{match['verb'][1:]} is not supported by this model; use predict")
        raise NotFound(f"malformed request: {method} {path}")

    def page(self):
        """The page at GET /: the packaged page.html with this model's name and input rule."""
        from html import escape

        html = PAGE.read_text(encoding="utf-8")
        for key, value in self.page_settings.items():
            html = html.replace(
                f'<meta name="keras-saat-{key}" content="">',
                f'<meta name="keras-saat-{key}" content="{escape(str(value))}">',
            )
        return Page(html)

    def start(self):
        """Starts serving in background threads; returns self (ports are then known)."""
        self.start_http()
        if self.grpc_port is not None:
            self._grpc = grpc_server(self)
            self._grpc.start()
        return self

    def stop(self):
        self.stop_http()
        if self._grpc is not None:
            self._grpc.stop(grace=1)
