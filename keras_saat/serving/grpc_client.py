"""GrpcClient: captions from TF Serving's gRPC PredictionService (port 8500)."""

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.serving.captions import captions_from_outputs, read_images
from keras_saat.serving.signatures import DEFAULT_SIGNATURE, PIXELS_SIGNATURE


class GrpcClient:
    """Calls `tensorflow.serving.PredictionService/Predict` with a batch of image bytes.

    Needs `tensorflow-serving-api` (a keras-saat dependency) and grpcio.

    Args:
        target: str. "host:port" of the gRPC endpoint. Defaults to "localhost:8500".
        model: str. The served model's name. Defaults to "keras_saat".
        version: int or None. A version to pin; None = the server's latest. Defaults to None.
        timeout: float. Seconds per request. Defaults to 60.
        max_message_mb: int. Largest request and reply (gRPC's default of 4 MB is small
            for a batch of photos). Defaults to 256.

    Example:
        ```python
        from keras_saat.serving import GrpcClient

        GrpcClient("localhost:8500", "keras_saat").caption(["photo.jpg"])
        ```
    """

    def __init__(
        self, target="localhost:8500", model="keras_saat", version=None, timeout=60.0,
        max_message_mb=256,
    ):  # fmt: skip
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        self.model = model
        self.version = version
        self.timeout = float(timeout)
        limit = int(max_message_mb) * 1024 * 1024
        options = [(f"grpc.max_{way}_message_length", limit) for way in ("send", "receive")]
        self.channel = grpc.insecure_channel(target, options=options)
        self.stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)

    def _spec(self, request, signature):
        request.model_spec.name = self.model
        request.model_spec.signature_name = signature
        if self.version is not None:
            request.model_spec.version.value = int(self.version)

    def _call(self, method, request):
        import grpc

        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise KerasSaatError(
                f"gRPC {err.code().name} from the model server: {err.details()}"
            ) from None

    def predict(self, inputs, signature=DEFAULT_SIGNATURE):
        """Runs a signature on a dict of arrays; returns a dict of NumPy arrays."""
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        self._spec(request, signature)
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        response = self._call(self.stub.Predict, request)
        return {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}

    def metadata(self):
        """The model's SignatureDefMap (GetModelMetadata), as a protobuf message."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._spec(request, "")
        response = self._call(self.stub.GetModelMetadata, request)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        return signatures

    def caption(self, images):
        """Captions encoded images (paths or bytes); see `RestClient.caption` for the result."""
        encoded = read_images(images)
        if not encoded:
            return []
        return captions_from_outputs(self.predict({"image_bytes": np.array(encoded, dtype=object)}))

    def caption_pixels(self, pixels):
        """Captions float RGB pixels (B, H, W, 3) in [0, 255] through `serving_pixels`."""
        return captions_from_outputs(
            self.predict({"pixels": np.asarray(pixels, np.float32)}, PIXELS_SIGNATURE)
        )

    def close(self):
        self.channel.close()
