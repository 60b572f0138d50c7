"""Crafted requests to the development server, for the hostile-input tests and the
bench's hostile part: bodies and messages whose declared sizes, nesting or pace lie.

Each builder makes the bytes a client would send; each case hands them to the
server's own request checks (`keras_saat.serving.request_checks`) with the export's
signatures, or, for what happens on the socket, to a `RequestGate` on 127.0.0.1.
"""

import contextlib
import json
import socket
import time

from tests.support.hostile_cases import HostileCase

MB = 1 << 20


def export_specs(signature):
    """The export's signatures (keras_saat/export/saved_model.py) as {input: TensorSpec}."""
    import tensorflow as tf

    from keras_saat.serving.answers import BadRequest
    from keras_saat.serving.signatures import DEFAULT_SIGNATURE, PIXELS_SIGNATURE

    specs = {
        DEFAULT_SIGNATURE: {"image_bytes": tf.TensorSpec([None], tf.string, name="image_bytes")},
        PIXELS_SIGNATURE: {"pixels": tf.TensorSpec([None, None, None, 3], tf.float32)},
    }
    if signature not in specs:
        raise BadRequest(f'Serving signature name: "{signature}" not found in signature def')
    return specs[signature]


def nested_b64_body(count):
    """`{"instances": [[{"b64": "AAAA"} x count]]}`: one instance holding `count` images."""
    return b'{"instances": [[' + b'{"b64": "AAAA"}, ' * (count - 1) + b'{"b64": "AAAA"}]]}'


def nested_text_body(count, size):
    """`{"instances": [["AAAA..." x count]]}`: one instance of `count` strings of `size` bytes."""
    text = b'"' + b"A" * size + b'"'
    return b'{"instances": [[' + b", ".join([text] * count) + b"]]}"


def empty_lists_body(count):
    """`{"signature_name": "serving_pixels", "inputs": [[], [], ...]}`: `count` empty lists."""
    return b'{"signature_name": "serving_pixels", "inputs": [' + b"[]," * (count - 1) + b"[]]}"


def rest_answer(body, max_batch=64):
    """What the dev server's checks answer a `:predict` body: "HTTP 400: ..." or "" (accepted)."""
    from keras_saat.serving.answers import BadRequest
    from keras_saat.serving.request_checks import check_json_size, rest_arrays

    try:
        check_json_size(body, max_batch)
        rest_arrays(json.loads(body), export_specs, max_batch)
    except BadRequest as err:
        return f"HTTP 400: {err}"
    return ""


def _varint(value):
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field: tag, length, payload."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def string_tensor_request(shape, values=(), empty_strings=0):
    """A serialized PredictRequest whose image_bytes declares `shape` and sends `values`
    and then `empty_strings` more empty string_val entries, written on the wire directly
    (two bytes each) so that building it holds no parsed message.

    Args:
        shape: list of int. The declared dims.
        values: list of bytes. string_val entries.
        empty_strings: int. Empty string_val entries appended after `values`.
    """
    from tensorflow.core.framework import tensor_pb2, types_pb2

    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING)
    for size in shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.string_val.extend(values)
    # string_val is field 8: tag 0x42, then a zero length.
    wire = tensor.SerializeToString() + b"\x42\x00" * empty_strings
    entry = _field(1, b"image_bytes") + _field(2, wire)  # inputs is a map<string, TensorProto>
    return _field(1, _field(1, b"cap")) + _field(2, entry)  # model_spec {name}, inputs


def grpc_answer(message, max_batch=64):
    """What the dev server's checks answer a serialized PredictRequest, parsed as the gRPC
    server parses it: "INVALID_ARGUMENT: ..." or "" (accepted)."""
    from tensorflow_serving.apis import predict_pb2

    from keras_saat.serving.answers import BadRequest
    from keras_saat.serving.grpc_wire import check_predict_wire
    from keras_saat.serving.request_checks import proto_arrays
    from keras_saat.serving.signatures import DEFAULT_SIGNATURE

    try:
        check_predict_wire(message, export_specs, max_batch)  # on the bytes, before parsing
        request = predict_pb2.PredictRequest.FromString(message)
        proto_arrays(DEFAULT_SIGNATURE, request.inputs, export_specs, max_batch)
    except BadRequest as err:
        return f"INVALID_ARGUMENT: {err}"
    return ""


def announce(address, declared, timeout=10):
    """A socket that sends a POST's headers announcing `declared` body bytes, and one byte."""
    sock = socket.create_connection(address, timeout=timeout)
    sock.sendall(
        b"POST /v1/models/cap:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Content-Length: {declared}\r\n\r\n{{".encode()
    )
    return sock


def post(address, body, headers=b"", timeout=10):
    """(status line, body) of one POST over a fresh socket, headers as given."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(
            b"POST /v1/models/cap:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + headers
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        answer = b""
        for _ in range(1000):  # bounded: the server closes after its answer
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), rest.decode(errors="replace")


def http_answer(status_line, body):
    code = status_line.split()[1] if len(status_line.split()) > 1 else "?"
    if code == "200":
        return ""
    with contextlib.suppress(ValueError):
        body = json.loads(body)["error"]
    return f"HTTP {code}: {body}"


def slow_uploads(gate, slow=4, declared=256 * MB):
    """`slow` sockets announce `declared` bytes and send one; then a small POST's answer.

    On a gate that reserves on Content-Length this answer is 503 (the budget is taken by
    bytes that never come); reserving on bytes received, the POST reaches its route.
    """
    sockets = [announce((gate.host, gate.port), declared) for _ in range(slow)]
    try:
        time.sleep(0.5)  # the gate has read their headers
        return http_answer(*post((gate.host, gate.port), b'{"instances": []}'))
    finally:
        for sock in sockets:
            sock.close()


def _rest_nested_b64(scratch):
    return rest_answer(nested_b64_body(6_000_000))  # 96 MB


def _rest_nested_text(scratch):
    return rest_answer(nested_text_body(100, MB))  # 100 MB


def _rest_empty_lists(scratch):
    return rest_answer(empty_lists_body(30_000_000))  # 90 MB


def _grpc_wide_strings(scratch):
    return grpc_answer(string_tensor_request([64, 262144], empty_strings=64 * 262144))  # 34 MB


def _grpc_declared_2e40(scratch):
    return grpc_answer(string_tensor_request([1 << 20, 1 << 20], [b"x"]))


def _http_slow_uploads(scratch):
    from keras_saat.serving.dev_http import RequestGate

    gate = RequestGate(max_inflight=1, read_timeout=5).start_http()
    try:
        return slow_uploads(gate)
    finally:
        gate.stop_http()


CASES = [
    HostileCase(
        "rest_nested_b64_instances",
        "server",
        "refused on its bytes, before parsing",
        _rest_nested_b64,
    ),
    HostileCase(
        "rest_nested_text_instances", "server", "parsed, refused before decoding", _rest_nested_text
    ),
    HostileCase(
        "rest_30m_empty_lists", "server", "refused on its bytes, before parsing", _rest_empty_lists
    ),
    HostileCase("grpc_64x262144_strings", "server", "refused on the wire form", _grpc_wide_strings),
    HostileCase("grpc_declared_2e40", "server", "refused on the wire form", _grpc_declared_2e40),
    HostileCase(
        "http_4_slow_256mb_uploads", "server", "others still served (not 503)", _http_slow_uploads
    ),
]
