"""The development server against request bodies whose sizes, nesting or pace lie.

The request checks are tested on crafted bytes (tests/support/crafted_requests.py),
without a server; the memory bounds in a child process whose address space is
capped (RLIMIT_AS), and the whole path once on a live server on 127.0.0.1. Every
socket has a timeout and every loop a bound.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.serving.request_checks import MAX_JSON_VALUES
from tests.helpers import ROOT, cap_address_space
from tests.support.crafted_requests import (
    MB,
    announce,
    empty_lists_body,
    grpc_answer,
    http_answer,
    nested_b64_body,
    nested_text_body,
    post,
    rest_answer,
    slow_uploads,
    string_tensor_request,
)

HEADROOM = 640 * MB  # address space over what the process holds at rest


def _pixels(value):
    return json.dumps({"signature_name": "serving_pixels", "inputs": value}).encode()


@pytest.mark.parametrize(
    "body, message",
    [
        (nested_b64_body(10), "has shape [1, 10]; the signature expects [-1]"),
        (nested_text_body(3, 8), "has shape [1, 3]"),
        (b'{"instances": [{"image_bytes": [{"b64": "AAAA"}]}]}', "has shape [1, 1]"),
        (b'{"inputs": [{"b64": "AAAA"}, [{"b64": "AAAA"}]]}', "got list"),
        (b'{"inputs": ["a", {"b64": "AAAA", "x": 1}]}', 'expected text or {"b64": ...}, got dict'),
        (_pixels([[[[1, 2, 3]]], [[[1, 2, 3], [4, 5, 6]]]]), "a list of 2 at depth 2"),
        (_pixels([[[[1, 2, 3]]], [[1, 2, 3]]]), "a list of 3 at depth 2"),
        (_pixels([[[[1, 2, [3]]]]]), "expected a number, got list"),
        (_pixels([[[[1, 2]]]]), "has shape [1, 1, 1, 2]"),
        (_pixels([[]]), "is empty below dimension 0"),
        (json.dumps({"inputs": [{"b64": "AAAA"}] * 65}).encode(), "65 instances in one request"),
    ],
)
def test_rest_inputs_are_checked_at_every_depth(body, message):
    answer = rest_answer(body)
    assert answer.startswith("HTTP 400: ") and message in answer, answer


@pytest.mark.parametrize(
    "body, message",
    [
        (empty_lists_body(MAX_JSON_VALUES), f"over {MAX_JSON_VALUES} JSON values"),
        (nested_b64_body(400), "401 JSON objects; a request of at most 64 instances"),
    ],
)
def test_rest_bodies_are_bounded_on_their_bytes_before_parsing(body, message):
    from keras_saat.serving.answers import BadRequest
    from keras_saat.serving.request_checks import check_json_size

    with pytest.raises(BadRequest, match=message):
        check_json_size(body, 64)


def test_well_formed_rest_inputs_pass_the_checks():
    from keras_saat.serving.request_checks import rest_arrays
    from tests.support.crafted_requests import export_specs

    b64 = {"b64": "AAAA"}
    for body in (
        {"instances": [b64, b64, "text"]},
        {"instances": [{"image_bytes": b64}]},
        {"inputs": {"image_bytes": [b64]}},
        {"instances": []},
        {"signature_name": "serving_pixels", "inputs": [[[[0.5, 1, 0.0]], [[1, 2, 3]]]]},
    ):
        assert rest_answer(json.dumps(body).encode()) == "", body
    _, arrays = rest_arrays({"instances": [b64, "a"]}, export_specs, 64)
    assert arrays["image_bytes"].tolist() == [b"\0\0\0", b"a"]


@pytest.mark.parametrize(
    "shape, values, empty, message",
    [
        ([64, 4096], [], 64 * 4096, "over 4096 string values; the signature takes at most 64"),
        ([1 << 20, 1 << 20], [b"x"], 0, "[1048576, 1048576] declares over 16777216 elements"),
        ([1 << 40], [b"x"], 0, "[1099511627776] declares over 16777216 elements"),
        ([3], [b"x"], 0, "holds 3 values but the request sends 1"),
        ([2, 1], [b"x", b"y"], 0, "has shape [2, 1]"),
    ],
)
def test_grpc_string_tensors_are_checked_on_the_wire(shape, values, empty, message):
    answer = grpc_answer(string_tensor_request(shape, values, empty))
    assert answer.startswith("INVALID_ARGUMENT: ") and message in answer, answer


def _pixels_request(tensor_bytes):
    from tests.support.crafted_requests import _field

    entry = _field(1, b"pixels") + _field(2, tensor_bytes)
    return _field(1, _field(1, b"cap") + _field(3, b"serving_pixels")) + _field(2, entry)


def test_grpc_numeric_tensors_take_only_their_dtypes_field():
    from tensorflow.core.framework import tensor_pb2

    from keras_saat.serving.answers import BadRequest
    from keras_saat.serving.grpc_wire import check_predict_wire
    from tests.support.crafted_requests import export_specs

    pixels = np.zeros([1, 2, 2, 3], np.float32)
    good = tf.make_tensor_proto(pixels)
    check_predict_wire(_pixels_request(good.SerializeToString()), export_specs, 64)
    head = tf.make_tensor_proto(0.0, tf.float32, [1, 2, 2, 3])
    head.ClearField("float_val")
    listed = tensor_pb2.TensorProto()
    listed.CopyFrom(head)
    listed.float_val.extend([0.5] * 12)  # packed, as protobuf 3 writes it
    check_predict_wire(_pixels_request(listed.SerializeToString()), export_specs, 64)
    unpacked = head.SerializeToString() + b"\x2d\0\0\0\0" * 12  # float_val, one tag each
    check_predict_wire(_pixels_request(unpacked), export_specs, 64)  # no larger parsed
    with pytest.raises(BadRequest, match="over 256 fields"):
        check_predict_wire(_pixels_request(unpacked + b"\x2d\0\0\0\0" * 300), export_specs, 64)
    int64s = head.SerializeToString() + b"\x52\x0c" + b"\x01" * 12  # packed int64_val
    with pytest.raises(BadRequest, match="field 5 of the TensorProto, not field 10"):
        check_predict_wire(_pixels_request(int64s), export_specs, 64)
    dims = head.SerializeToString() + b"\x12\x40" + b"\x12\x00" * 32  # a second tensor_shape
    with pytest.raises(BadRequest, match="over 32 dimensions"):
        check_predict_wire(_pixels_request(dims), export_specs, 64)


CAPPED = textwrap.dedent(
    f"""
    import resource, sys
    from tests.support.hostile_cases import hostile_cases
    cases = {{case.name: case for case in hostile_cases()}}
    cases["baseline"].run(None)
    {cap_address_space(HEADROOM)}
    for name in sys.argv[1:]:
        print(name, "->", cases[name].run(None)[:200], flush=True)
    """
)


@pytest.mark.slow
def test_the_crafted_cases_are_answered_in_a_capped_address_space():
    """Each crafted body of tens of megabytes is refused within HEADROOM of memory."""
    names = ["rest_nested_b64_instances", "rest_nested_text_instances", "rest_30m_empty_lists"]
    names += ["grpc_64x262144_strings", "grpc_declared_2e40"]
    result = subprocess.run(
        [sys.executable, "-c", CAPPED, *names],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    answers = dict(line.split(" -> ", 1) for line in result.stdout.splitlines())
    assert set(answers) == set(names)
    assert all(answer.startswith(("HTTP 400", "INVALID_ARGUMENT")) for answer in answers.values())


def test_slow_uploads_hold_only_the_bytes_they_sent():
    """Bodies announced at 256 MB and sent a byte at a time leave the budget to others."""
    from keras_saat.serving.dev_http import RequestGate

    gate = RequestGate(max_inflight=1, read_timeout=5).start_http()
    try:
        answer = slow_uploads(gate, slow=4)
        assert answer.startswith("HTTP 404"), answer  # the route answered: no 503
        assert gate._reading < MB  # what the slow ones hold, while they still hold it
    finally:
        gate.stop_http()


def test_a_body_over_the_budget_as_it_arrives_is_503_and_closed():
    from keras_saat.serving.dev_http import RequestGate
    from keras_saat.serving.request_checks import MAX_BODY_BYTES

    gate = RequestGate(max_inflight=1, read_timeout=5).start_http()
    try:
        gate._reading = MAX_BODY_BYTES - 10  # others hold nearly all of it
        status, body = post((gate.host, gate.port), b"x" * 100)
        assert status.split()[1] == "503" and "retry shortly" in body
        gate._reading = 0
        assert http_answer(*post((gate.host, gate.port), b"{}")).startswith("HTTP 404")
    finally:
        gate.stop_http()


def test_chunked_bodies_are_refused():
    from keras_saat.serving.dev_http import RequestGate

    gate = RequestGate(read_timeout=5).start_http()
    try:
        answer = http_answer(
            *post((gate.host, gate.port), b"{}", b"Transfer-Encoding: chunked\r\n")
        )
        assert answer.startswith("HTTP 400") and "Transfer-Encoding" in answer
    finally:
        gate.stop_http()


# ------------------------------------------------------------ a live server
SERVER = textwrap.dedent(
    f"""
    import resource, sys
    from keras_saat.serving import DevServer
    server = DevServer(sys.argv[1], "cap", port=0, grpc_port=0, log=lambda *_: None,
                       max_inflight=1, read_timeout=30).start()
    {cap_address_space(HEADROOM)}
    print(server.port, server.grpc_port, flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture(scope="module")
def capped_server(export_base):
    """A DevServer of the export in a child whose address space is capped at HEADROOM
    over what it holds once started: (REST address, gRPC address, process)."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(export_base)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env={**os.environ, "MALLOC_ARENA_MAX": "2"},
    )  # fmt: skip
    try:
        rest_port, grpc_port = process.stdout.readline().split()
        yield ("127.0.0.1", int(rest_port)), f"127.0.0.1:{grpc_port}", process
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def _serves_an_image(rest, test_images):
    import base64

    image = base64.b64encode(test_images[0].read_bytes()).decode()
    status, body = post(rest, json.dumps({"instances": [{"b64": image}]}).encode(), timeout=120)
    return status.split()[1] == "200" and json.loads(body)["predictions"][0]["valid"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "body", [nested_b64_body(6_000_000), nested_text_body(100, MB)], ids=["b64", "text"]
)
def test_a_live_server_refuses_nested_rest_bodies_within_its_cap(capped_server, test_images, body):
    rest, _, process = capped_server
    status, answer = post(rest, body, timeout=120)  # about 100 MB, one instance
    assert status.split()[1] == "400", (status, answer[:300])
    assert _serves_an_image(rest, test_images) and process.poll() is None


@pytest.mark.slow
def test_a_live_server_refuses_wide_grpc_tensors_within_its_cap(capped_server, test_images):
    import grpc
    from tensorflow_serving.apis import predict_pb2

    rest, target, process = capped_server
    message = string_tensor_request([64, 262144], empty_strings=64 * 262144)  # 34 MB
    options = [("grpc.max_send_message_length", 64 * MB)]
    with grpc.insecure_channel(target, options=options) as channel:
        predict = channel.unary_unary(
            "/tensorflow.serving.PredictionService/Predict",
            response_deserializer=predict_pb2.PredictResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as err:
            predict(message, timeout=120)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert _serves_an_image(rest, test_images) and process.poll() is None


@pytest.mark.slow
def test_a_live_server_serves_while_slow_uploads_announce_its_whole_budget(
    capped_server, test_images
):
    import base64

    rest, _, _ = capped_server
    slow = [announce(rest, 256 * MB) for _ in range(2)]  # max_inflight=1: 256 MB budget
    try:
        image = base64.b64encode(test_images[0].read_bytes()).decode()
        body = json.dumps({"instances": [{"b64": image}]}).encode()
        status, answer = post(rest, body, timeout=60)
        assert status.split()[1] == "200", (status, answer[:300])
    finally:
        for sock in slow:
            sock.close()


def test_grpc_requests_have_a_bounded_number_of_fields():
    from tensorflow_serving.apis import get_model_metadata_pb2

    from keras_saat.serving.answers import BadRequest
    from keras_saat.serving.grpc_wire import check_field_count

    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "cap"
    check_field_count(request.SerializeToString(), "the request")
    with pytest.raises(BadRequest, match="over 256 fields"):
        check_field_count(b"\x12\x00" * 100_000, "the request")  # 100,000 metadata_field ""
    answer = grpc_answer(string_tensor_request([1], [b"x"]) + b"\x1a\x00" * 100_000)
    assert answer.startswith("INVALID_ARGUMENT") and "over 256 fields" in answer  # output_filter
