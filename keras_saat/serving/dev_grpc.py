"""The development server's gRPC side: TF Serving's PredictionService."""

from keras_saat.serving.answers import BadRequest, Busy
from keras_saat.serving.grpc_wire import check_field_count, check_predict_wire, model_spec
from keras_saat.serving.request_checks import MAX_BODY_BYTES
from keras_saat.serving.signatures import DEFAULT_SIGNATURE


def grpc_server(server):
    """A gRPC server (not started) of a DevServer's model: PredictionService's Predict
    and GetModelMetadata, each message reserved in the body budget REST shares."""
    from concurrent import futures

    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        model_pb2,
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    def answer_spec(signature=""):
        return model_pb2.ModelSpec(
            name=server.name, signature_name=signature, version={"value": server.version}
        )

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def _check(self, spec, context):
            if spec.name != server.name:
                context.abort(grpc.StatusCode.NOT_FOUND, f"Servable not found: {spec.name}")
            if spec.HasField("version") and spec.version.value != server.version:
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"Servable not found: Specific({spec.name}, {spec.version.value})",
                )

        def predict_bytes(self, data, context):
            """Predict on the request's bytes, checked (grpc_wire) before parsing."""
            with server.reading() as reserve:
                try:
                    reserve(len(data))
                    self._check(model_spec(data), context)
                    check_predict_wire(data, server.input_specs, server.max_batch)
                except BadRequest as err:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
                except Busy as err:
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
                return self.Predict(predict_pb2.PredictRequest.FromString(data), context)

        def metadata_bytes(self, data, context):
            """GetModelMetadata on the request's bytes, its field count checked first."""
            try:
                check_field_count(data, "the request")
            except BadRequest as err:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            request = get_model_metadata_pb2.GetModelMetadataRequest.FromString(data)
            return self.GetModelMetadata(request, context)

        def Predict(self, request, context):
            self._check(request.model_spec, context)
            signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
            try:
                outputs = server.run(
                    signature, server.arrays_from_protos(signature, request.inputs)
                )
            except BadRequest as err:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            return predict_pb2.PredictResponse(
                model_spec=answer_spec(signature),
                outputs={key: tf.make_tensor_proto(value) for key, value in outputs.items()},
            )

        def GetModelMetadata(self, request, context):
            self._check(request.model_spec, context)
            response = get_model_metadata_pb2.GetModelMetadataResponse(model_spec=answer_spec())
            signatures = get_model_metadata_pb2.SignatureDefMap(signature_def=server.signature_defs)
            response.metadata["signature_def"].Pack(signatures)
            return response

    grpc_server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=server.max_inflight),
        maximum_concurrent_rpcs=server.max_connections,
        options=[(f"grpc.max_{way}_message_length", MAX_BODY_BYTES) for way in ("send", "receive")],
    )
    servicer = Servicer()
    handlers = {
        # No request_deserializer: the methods get the bytes as received.
        "Predict": grpc.unary_unary_rpc_method_handler(
            servicer.predict_bytes,
            response_serializer=predict_pb2.PredictResponse.SerializeToString,
        ),
        "GetModelMetadata": grpc.unary_unary_rpc_method_handler(
            servicer.metadata_bytes,
            response_serializer=get_model_metadata_pb2.GetModelMetadataResponse.SerializeToString,
        ),
    }
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", handlers),)
    )
    server.grpc_port = grpc_server.add_insecure_port(f"{server.host}:{server.grpc_port}")
    return grpc_server
