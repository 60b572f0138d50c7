"""Serving: REST and gRPC clients and a development server for an exported SavedModel.

    keras-saat export --workdir runs/demo --out models/keras_saat
    keras-saat serve --model-base models/keras_saat --name keras_saat --port 8501
    # then open http://localhost:8501/ : the page (captions, attention per word)
    keras-saat export --workdir runs/demo --out models/litert --format litert

    from keras_saat.serving import RestClient
    RestClient("http://localhost:8501", "keras_saat").caption(["photo.jpg"])

Nothing here imports Keras or the model code. The exports themselves (SavedModel,
LiteRT, preset) are written by `keras_saat.export.export_model`; a trained workdir's
export, with its config's decode and export sections, is
`keras_saat.experiment.export_workdir`.
"""

from keras_saat._lazy import lazy_getattr

_EXPORTS = {
    "DevServer": "keras_saat.serving.dev_server",
    "GrpcClient": "keras_saat.serving.grpc_client",
    "RestClient": "keras_saat.serving.rest_client",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr("keras_saat.serving", _EXPORTS, globals())
