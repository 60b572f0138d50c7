"""The development server against slow, greedy and foreign clients, live on 127.0.0.1.

Every connection here has a timeout and every loop a bound: the server must answer
within seconds or the test fails, it never hangs.
"""

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.serving import DevServer, GrpcClient, RestClient

pytestmark = pytest.mark.slow
READ_TIMEOUT = 1.5
MAX_CONNECTIONS = 6


@pytest.fixture(scope="module")
def base(export_base, tmp_path_factory):
    """A copy of the export, so a test may change its files on disk."""
    copy = tmp_path_factory.mktemp("hostile") / "cap"
    shutil.copytree(export_base, copy)
    return copy


@pytest.fixture(scope="module")
def server(base):
    server = DevServer(
        base, "cap", port=0, grpc_port=0, log=lambda *_: None, max_inflight=1, max_batch=2,
        max_connections=MAX_CONNECTIONS, read_timeout=READ_TIMEOUT,
    ).start()  # fmt: skip
    yield server
    server.stop()


def request(server, method, path, body=None, headers=None, timeout=10):
    """(status, body bytes) over a fresh connection, headers exactly as given."""
    import http.client

    connection = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def predict_body(images):
    return json.dumps({"instances": [{"b64": base64.b64encode(i).decode()} for i in images]})


def stalled(server, declared=1000):
    """A connection that sends its headers, declares a body and never sends it."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.sendall(
        b"POST /v1/models/cap:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Content-Length: {declared}\r\n\r\n".encode()
    )
    return sock


def closed_by_server(sock, within):
    """Whether the server closes `sock` within `within` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_clients_that_never_send_their_body_stall_nothing(server, test_images):
    slow = [stalled(server) for _ in range(4)]
    try:
        # With the slot taken before the body, these would wait for the stalled ones.
        assert request(server, "GET", "/v1/models/cap")[0] == 200
        assert request(server, "GET", "/")[0] == 200
        image = test_images[0].read_bytes()
        status, body = request(server, "POST", "/v1/models/cap:predict", predict_body([image]))
        assert status == 200 and json.loads(body)["predictions"][0]["valid"]
        # The stalled ones are cut off once their time to send the request is up.
        assert all(closed_by_server(sock, READ_TIMEOUT + 3) for sock in slow)
    finally:
        for sock in slow:
            sock.close()


def test_a_trickling_client_is_cut_off_at_the_deadline(server):
    sock = socket.create_connection((server.host, server.port), timeout=10)
    try:
        sock.sendall(b"GET /v1/models/cap HTTP/1.1\r\n")
        cut = False
        for _ in range(40):  # a header byte every 0.2 s for 8 s resets any per-read timeout
            try:
                sock.sendall(b"X")
            except OSError:
                cut = True
                break
            if closed_by_server(sock, 0.2):
                cut = True
                break
        assert cut  # the whole-request deadline, READ_TIMEOUT, came first
    finally:
        sock.close()


def test_connections_over_the_limit_get_503_and_the_server_recovers(server):
    busy = [stalled(server) for _ in range(MAX_CONNECTIONS)]  # each mid-request
    try:
        time.sleep(0.3)  # the server has taken them all
        status, body = request(server, "GET", "/v1/models/cap")
        assert status == 503 and "too many connections" in json.loads(body)["error"]
    finally:
        for sock in busy:
            sock.close()
    deadline = time.time() + READ_TIMEOUT + 5
    while request(server, "GET", "/v1/models/cap")[0] != 200:
        assert time.time() < deadline, "the server did not recover its connections"
        time.sleep(0.2)


@pytest.mark.parametrize("method, status", [("GET", 404), ("OPTIONS", 501), ("HEAD", 501)])
def test_a_client_opening_a_connection_a_request_is_never_refused_near_the_limit(method, status):
    """All slots but one held mid-request: a client that reads each answer and opens a
    new connection at once meets the previous one's thread still finishing (after the
    routes' answers and the standard library's own, 501 here); its slot is reclaimed or
    waited for, never a 503, and the held requests are not cut."""
    import http.client

    from keras_saat.serving.dev_http import RequestGate

    gate = RequestGate(max_connections=3, read_timeout=60).start_http()
    held = [stalled(gate) for _ in range(2)]
    try:
        for _ in range(100):  # until both are mid-request (not idle, not to be cut)
            if gate.connection_slots._value == 1 and not gate._idle:
                break
            time.sleep(0.05)
        statuses = []
        for _ in range(200):
            connection = http.client.HTTPConnection(gate.host, gate.port, timeout=10)
            connection.request(method, "/v1/models/cap", headers={"Host": "127.0.0.1"})
            response = connection.getresponse()
            response.read()
            connection.close()
            statuses.append(response.status)
        assert set(statuses) == {status}, {s: statuses.count(s) for s in set(statuses)}
        assert not any(closed_by_server(sock, 0.05) for sock in held)
    finally:
        for sock in held:
            sock.close()
        gate.stop_http()


def test_a_connection_waiting_for_a_request_is_reclaimed_not_one_still_answering():
    """One connection is sent a large answer it never reads, another waits kept alive
    between requests, a third is mid-request: a new client takes the waiting one's
    slot at once, not a 503 after waiting for the unread answer."""
    import http.client

    from keras_saat.serving.dev_http import RequestGate

    class Large(RequestGate):
        def route(self, method, path, body):
            if path == "/large":
                return {"text": "a" * (64 << 20)}  # far more than the socket buffers
            return super().route(method, path, body)

    gate = Large(max_connections=3, read_timeout=60).start_http()
    unread = socket.create_connection((gate.host, gate.port), timeout=10)
    unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    kept = http.client.HTTPConnection(gate.host, gate.port, timeout=10)
    try:
        unread.sendall(b"GET /large HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.3)  # the server is writing its answer
        kept.request("GET", "/kept", headers={"Host": "127.0.0.1"})
        assert kept.getresponse().read()
        busy = stalled(gate)
        time.sleep(0.3)  # the server has read its headers
        assert request(gate, "GET", "/new", headers={"Host": "127.0.0.1"})[0] == 404
        assert closed_by_server(kept.sock, 5)  # the one reclaimed
        assert not closed_by_server(busy, 0.05)
        busy.close()
    finally:
        unread.close()
        kept.close()
        gate.stop_http()


def test_idle_connections_hold_no_slot_a_client_needs(server):
    """Connections that send nothing (paced, five times the limit) and a kept-alive one
    between requests: each valid request is answered at once, the longest idle closed."""
    import http.client

    kept = http.client.HTTPConnection(server.host, server.port, timeout=10)
    kept.request("GET", "/v1/models/cap")
    response = kept.getresponse()
    assert response.status == 200 and response.read()
    idle = []
    try:
        for _ in range(5 * MAX_CONNECTIONS):
            idle.append(socket.create_connection((server.host, server.port), timeout=10))
            time.sleep(0.01)
        for _ in range(3):
            started = time.monotonic()
            assert request(server, "GET", "/v1/models/cap")[0] == 200
            assert time.monotonic() - started < READ_TIMEOUT  # not after an idle one's timeout
        assert closed_by_server(idle[0], 1.0)  # the first, idle the longest, was closed
    finally:
        for sock in idle:
            sock.close()
        kept.close()


def test_batches_over_the_limit_are_refused_on_rest_and_grpc(server, test_images):
    images = [p.read_bytes() for p in test_images[:3]]
    status, body = request(server, "POST", "/v1/models/cap:predict", predict_body(images))
    assert status == 400 and "3 instances in one request" in json.loads(body)["error"]
    columnar = json.dumps({"inputs": [{"b64": base64.b64encode(i).decode()} for i in images]})
    status, body = request(server, "POST", "/v1/models/cap:predict", columnar)
    assert status == 400 and "over this server's limit of 2" in json.loads(body)["error"]
    with pytest.raises(KerasSaatError, match="INVALID_ARGUMENT .*: 3 instances in one request"):
        GrpcClient(f"127.0.0.1:{server.grpc_port}", "cap").caption(images)
    assert len(RestClient(server.url, "cap").caption(images[:2])) == 2


@pytest.mark.parametrize(
    "proto, message",
    [
        ("strings", "holds 2000000 values but the request sends 1"),
        ("floats", "holds 6000000 values but the request sends 3"),
        ("huge", "declares over"),
    ],
)
def test_grpc_tensors_must_send_the_values_their_shape_declares(server, proto, message):
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    tensor = tensor_pb2.TensorProto()
    signature, key = "serving_default", "image_bytes"
    if proto == "strings":  # 13 bytes that tf.make_ndarray would make 2,000,000 images of
        tensor.dtype = types_pb2.DT_STRING
        tensor.tensor_shape.CopyFrom(tensor_shape_pb2.TensorShapeProto(dim=[{"size": 2_000_000}]))
        tensor.string_val.append(b"x")
    else:
        signature, key = "serving_pixels", "pixels"
        tensor.dtype = types_pb2.DT_FLOAT
        sizes = [2_000, 1_000, 1, 3] if proto == "floats" else [1 << 20, 1 << 20, 1 << 20, 3]
        tensor.tensor_shape.CopyFrom(
            tensor_shape_pb2.TensorShapeProto(dim=[{"size": s} for s in sizes])
        )
        tensor.float_val.extend([1.0, 2.0, 3.0])
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "cap", signature
    request.inputs[key].CopyFrom(tensor)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_rest_and_grpc_share_the_model_slots(server, test_images):
    image = test_images[0].read_bytes()
    server.peak_inflight = 0
    rest, rpc = RestClient(server.url, "cap"), GrpcClient(f"127.0.0.1:{server.grpc_port}", "cap")
    errors = []

    def hammer(client):
        try:
            for _ in range(3):
                assert client.caption([image])[0]["valid"]
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=hammer, args=(c,)) for c in (rest, rpc) * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and server.peak_inflight == 1  # max_inflight=1 across both


def test_a_long_version_number_is_404_not_500(server):
    status, body = request(server, "GET", "/v1/models/cap/versions/" + "9" * 5000)
    assert status == 404 and "malformed request" in json.loads(body)["error"]


def test_foreign_hosts_and_origins_are_refused(server, test_images):
    status, body = request(server, "GET", "/v1/models/cap", headers={"Host": "evil.example"})
    assert status == 403 and "not a loopback name" in json.loads(body)["error"]
    headers = {"Origin": "http://evil.example", "Content-Type": "application/json"}
    status, body = request(server, "POST", "/v1/models/cap:predict", "{}", headers)
    assert status == 403 and "evil.example" in json.loads(body)["error"]
    own = {"Origin": f"http://127.0.0.1:{server.port}", "Host": f"127.0.0.1:{server.port}"}
    body = predict_body([test_images[0].read_bytes()])
    status, answer = request(server, "POST", "/v1/models/cap:predict", body, own)
    assert status == 200, answer


def test_a_client_hanging_up_prints_no_traceback(server, test_images, capfd):
    body = predict_body([test_images[0].read_bytes()]).encode()
    for _ in range(3):
        sock = socket.create_connection((server.host, server.port), timeout=10)
        sock.sendall(
            b"POST /v1/models/cap:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset, before the answer comes
    time.sleep(2)
    assert request(server, "GET", "/v1/models/cap")[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_the_page_describes_the_graph_it_serves_not_the_file_on_disk(server, base):
    metadata = base / "1" / "assets.extra" / "keras_saat.json"
    saved = json.loads(metadata.read_text())
    metadata.write_text(json.dumps({**saved, "resize": "stretch"}))
    try:
        status, page = request(server, "GET", "/")
        expected = f'<meta name="keras-saat-resize" content="{saved["resize"]}">'
        assert status == 200 and expected in page.decode()
    finally:
        metadata.write_text(json.dumps(saved))


def test_sigterm_to_serve_a_workdir_removes_its_scratch_export(trained_workdir):
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from keras_saat.cli import main; sys.exit(main())",
         "serve", "--workdir", str(trained_workdir), "--name", "cap", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        scratch, deadline = None, time.time() + 300
        while scratch is None and time.time() < deadline:
            line = process.stdout.readline()
            assert line, process.stderr.read()[-2000:]
            found = re.search(r"from (\S*keras-saat-serve-[^/\s]+)/", line)
            scratch = found and Path(found.group(1))
        assert scratch is not None and scratch.is_dir()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143  # 128 + SIGTERM, as every command exits
        assert not scratch.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


def test_sigterm_during_the_scratch_export_removes_it(trained_workdir, tmp_path):
    """The signal arrives while `serve` still exports the workdir (its first line is the
    export's): the half-written scratch folder goes too, and the exit is SIGTERM's."""
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from keras_saat.cli import main; sys.exit(main())",
         "serve", "--workdir", str(trained_workdir), "--name", "cap", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch_root)},
    )  # fmt: skip
    try:
        line = process.stdout.readline()
        assert "folded" in line or "exported" in line, (line, process.stderr.read()[-2000:])
        assert list(scratch_root.glob("keras-saat-serve-*"))  # the export is under way
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
        assert list(scratch_root.glob("keras-saat-serve-*")) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


def test_tensor_from_proto_round_trips_what_clients_send():
    from keras_saat.serving.request_checks import tensor_from_proto

    for value in (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([b"a", b"bc"], object)):
        np.testing.assert_array_equal(tensor_from_proto(tf.make_tensor_proto(value), "x"), value)
