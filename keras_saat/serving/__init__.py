"""Serving: REST and gRPC clients and a development server for an exported SavedModel.
Nothing here imports Keras or the model code."""

from keras_saat._lazy import lazy_getattr

_EXPORTS = {
    "DevServer": "keras_saat.serving.dev_server",
    "GrpcClient": "keras_saat.serving.grpc_client",
    "RestClient": "keras_saat.serving.rest_client",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("keras_saat.serving", _EXPORTS, globals())
