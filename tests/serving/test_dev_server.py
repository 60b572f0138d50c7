"""The development server speaks TF Serving's REST (and gRPC) API; the clients read it."""

import base64
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from keras_saat.errors import KerasSaatError
from keras_saat.serving import DevServer, GrpcClient, RestClient
from tests.helpers import BAD, encode

pytestmark = pytest.mark.slow
REQUESTS = Path(__file__).parents[2] / "export" / "requests"


@pytest.fixture(scope="module")
def server(export_base):
    lines = []
    server = DevServer(export_base, "cap", port=0, grpc_port=0, log=lines.append).start()
    server.lines = lines
    yield server
    server.stop()


@pytest.fixture(scope="module")
def images(test_images):
    return test_images


def post(server, path, body):
    request = urllib.request.Request(f"{server.url}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_rest_row_and_columnar_equal_the_signature(server, images):
    client = RestClient(server.url, "cap")
    data = [path.read_bytes() for path in images] + [BAD["text"][0]()]
    rows = client.caption(data)
    columns = client.caption(data, columnar=True)
    direct = server.run("serving_default", {"image_bytes": np.array(data, dtype=object)})
    for i, (row, column) in enumerate(zip(rows, columns, strict=True)):
        assert row["caption"] == column["caption"] == direct["caption"][i].decode()
        assert row["valid"] == column["valid"] == bool(direct["valid"][i])
        np.testing.assert_allclose(row["attention"], column["attention"])
        n = len(row["tokens"])
        np.testing.assert_allclose(row["attention"], direct["attention"][i, :n], atol=1e-6)
        if row["valid"]:
            assert row["tokens"][: len(row["caption"].split())] == row["caption"].split()
            assert row["attention"].shape == (n, 8, 8) and n >= 1
    assert not rows[-1]["valid"] and rows[-1]["error"].startswith("not an image")
    pixels = client.caption_pixels(np.zeros((2, 20, 30, 3)))
    assert [p["valid"] for p in pixels] == [True, True]


def test_no_images_send_no_request():
    """An empty batch is answered here: nothing listens on the port the clients name."""
    assert RestClient("http://127.0.0.1:9", "cap").caption([]) == []
    assert RestClient("http://127.0.0.1:9", "cap").caption([], columnar=True) == []
    grpc = GrpcClient("127.0.0.1:9", "cap")
    assert grpc.caption([]) == []
    grpc.close()


def test_status_metadata_and_warmup(server):
    client = RestClient(server.url, "cap")
    assert client.status()["model_version_status"][0] == {
        "version": "1",
        "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }
    assert RestClient(server.url, "cap", version=1).status()["model_version_status"]
    signatures = client.metadata()["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "serving_pixels"}
    inputs = signatures["serving_default"]["inputs"]["image_bytes"]
    assert inputs["dtype"] == "DT_STRING"
    outputs = signatures["serving_default"]["outputs"]
    assert set(outputs) == {
        "caption", "tokens", "log_prob", "attention", "novelty", "familiar", "valid", "error",
    }  # fmt: skip
    assert outputs["familiar"]["dtype"] == "DT_BOOL"
    assert server.warmup() == 2  # both recorded requests replay
    assert server.lines == ["warmed up: 2 recorded requests replayed (assets.extra)"]


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/v1/models/cap:predict", b"{not json", 400, "not valid JSON"),
        ("/v1/models/cap:predict", b'{"instances": [{"b64": "@@"}]}', 400, "not valid base64"),
        ("/v1/models/cap:predict", b'{"instances": [], "inputs": []}', 400, "exactly one of"),
        ("/v1/models/cap:predict", b'{"instances": [1]}', 400, "expected text"),
        ("/v1/models/cap:predict", b'{"signature_name": "nope", "instances": []}', 400, '"nope" not found'),
        ("/v1/models/cap:predict", b'{"signature_name": "serving_pixels", "inputs": [1, 2]}', 400, "has shape [2]"),
        ("/v1/models/cap:predict", b'{"inputs": {"images": []}}', 400, "missing image_bytes"),
        ("/v1/models/cap:classify", b"{}", 400, "classify is not supported"),
        ("/v1/models/other:predict", b'{"instances": []}', 404, "Latest(other)"),
        ("/v1/models/cap/versions/7:predict", b'{"instances": []}', 404, "Specific(cap, 7)"),
        ("/v2/nothing", b"{}", 404, "malformed request"),
        ("/v1/models/cap:predict", b"[" * 100_000 + b"]" * 100_000, 400, "nests JSON too deeply"),
        ("/v1/models/cap:predict", b'{"instances": ' + b"[" * 900 + b"]" * 900 + b"}", 400, "image_bytes"),
        ("/v1/models/cap:predict", b'{"inputs": ' + b"[" * 900 + b'"x"' + b"]" * 900 + b"}", 400, "input image_bytes"),
        ("/v1/models/cap:predict", b'{"signature_name": ["x"], "instances": []}', 400, "must be a string"),
        ("/v1/models/cap:predict", b'{"instances": {"b64": ""}}', 400, "must be a list"),
        ("/v1/models/cap:predict", b'{"signature_name": "serving_pixels", "inputs": [[[[1e400]]]]}', 400, ""),
        ("/v1/models/cap:predict", b"\xff\xfe not utf-8", 400, "not valid JSON"),
    ],
)  # fmt: skip
def test_bad_requests_get_an_error_body(server, path, body, status, message):
    code, answer = post(server, path, body)
    assert code == status and message in answer["error"], answer


def raw_request(server, method, path, headers, body=b""):
    """(status, JSON answer) for a request with headers exactly as given."""
    import http.client

    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for key, value in headers.items():
            connection.putheader(key, value)
        connection.endheaders()
        if body:
            connection.send(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize(
    "length, message",
    [("-5", "Content-Length must be a number of bytes"), ("ten", "must be a number"),
     ("\u00b2", "must be a number"), (str(10**12), "request body over")],
)  # fmt: skip
def test_a_bad_content_length_gets_400_and_the_server_goes_on(server, length, message):
    status, answer = raw_request(
        server, "POST", "/v1/models/cap:predict", {"Content-Length": length}, b'{"instances": []}'
    )
    assert status == 400 and message in answer["error"]
    assert raw_request(server, "GET", "/v1/models/cap", {})[0] == 200


def test_malformed_requests_among_good_ones_under_load(server, images):
    """8 clients x 25 requests: good images, bad images and malformed bodies and headers,
    each answered as it should be; the server is alive after."""
    good = images[0].read_bytes()
    expected = RestClient(server.url, "cap").caption([good])[0]["caption"]
    deep = b"[" * 50_000 + b"]" * 50_000
    cases = [
        ("good", lambda: RestClient(server.url, "cap").caption([good, b"junk"])),
        ("json", lambda: post(server, "/v1/models/cap:predict", b"{broken")),
        ("deep", lambda: post(server, "/v1/models/cap:predict", deep)),
        (
            "length",
            lambda: raw_request(server, "POST", "/v1/models/cap:predict", {"Content-Length": "-1"}),
        ),
        ("path", lambda: post(server, "/v1/models/cap:explode", b"{}")),
    ]
    wrong = []

    def check(kind, answer):
        if kind == "good":
            return answer[0]["caption"] == expected and not answer[1]["valid"]
        status, body = answer
        return status == (404 if kind == "path" else 400) and body["error"]

    def client(worker):
        for k in range(25):
            kind, send = cases[(worker + k) % len(cases)]
            try:
                if not check(kind, send()):
                    wrong.append((worker, k, kind))
            except Exception as err:  # a dropped connection is a wrong answer too
                wrong.append((worker, k, kind, repr(err)))

    threads = [threading.Thread(target=client, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert wrong == []
    assert raw_request(server, "GET", "/v1/models/cap", {})[0] == 200
    # 8 clients, but never more than max_inflight bodies read at once: bounded memory.
    assert 1 <= server.peak_inflight <= server.max_inflight == 4


def test_the_sample_request_bodies(server):
    for name, key in (("instances.json", "predictions"), ("inputs.json", "outputs")):
        code, answer = post(server, "/v1/models/cap:predict", (REQUESTS / name).read_bytes())
        assert code == 200, answer
        valid = answer[key][0]["valid"] if key == "predictions" else answer[key]["valid"][0]
        assert valid is True
    sample = json.loads((REQUESTS / "instances.json").read_text())["instances"][0]["b64"]
    assert base64.b64decode(sample) == (REQUESTS / "shapes.jpg").read_bytes()


def test_concurrent_clients_all_succeed(server, images):
    """8 clients, 200 requests of 1-3 images (some bad), all answered correctly."""
    data = [path.read_bytes() for path in images]
    expected = {
        i: RestClient(server.url, "cap").caption([d])[0]["caption"] for i, d in enumerate(data)
    }
    failures, answered = [], []

    def client(worker):
        rest = RestClient(server.url, "cap")
        for k in range(25):
            picks = [(worker + k + j) % len(data) for j in range(1 + k % 3)]
            batch = [data[i] for i in picks] + ([b""] if k % 5 == 0 else [])
            try:
                result = rest.caption(batch, columnar=bool(k % 2))
            except KerasSaatError as err:
                failures.append(str(err))
                continue
            captions = [r["caption"] for r in result[: len(picks)]]
            if captions != [expected[i] for i in picks] or (k % 5 == 0 and result[-1]["valid"]):
                failures.append(f"worker {worker} request {k}: {captions}")
            answered.append(1)

    threads = [threading.Thread(target=client, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert failures == [] and len(answered) == 200


def test_grpc_client(server, images):
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}", "cap")
    data = [path.read_bytes() for path in images[:2]] + [encode("TIFF")]
    results = client.caption(data)
    rest = RestClient(server.url, "cap").caption(data)
    assert [r["caption"] for r in results] == [r["caption"] for r in rest]
    assert [r["valid"] for r in results] == [True, True, False]
    assert "unsupported image format TIFF" in results[2]["error"]
    np.testing.assert_allclose(results[0]["attention"], rest[0]["attention"], atol=1e-6)
    assert set(client.metadata().signature_def) == {"serving_default", "serving_pixels"}
    with pytest.raises(KerasSaatError, match="NOT_FOUND"):
        GrpcClient(f"127.0.0.1:{server.grpc_port}", "other").caption(data[:1])
    with pytest.raises(KerasSaatError, match="INVALID_ARGUMENT"):
        client.predict({"images": np.array([b""], dtype=object)})
    client.close()


def test_the_serve_command(export_base, images):
    """`keras-saat serve` in its own process: it starts, answers, and imports no model code."""
    process = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from keras_saat.cli import main; sys.exit(main())",
         "serve", "--model-base", str(export_base), "--name", "cap", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = None
        deadline = time.time() + 300
        while url is None and time.time() < deadline:
            line = process.stdout.readline()
            assert line, process.stderr.read()[-2000:]
            found = re.search(r"REST (http://\S+)/v1/models/cap", line)
            url = found and found.group(1)
        result = RestClient(url, "cap").caption([images[0]])
        assert result[0]["valid"] and result[0]["caption"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_dev_server_imports_no_model_code(export_base):
    code = (
        "import sys; from keras_saat.serving import DevServer, RestClient; "
        f"DevServer({str(export_base)!r}, 'cap', port=0).start(); "
        "print(sorted(m for m in sys.modules if (m + '.').startswith(('keras_saat.models.', "
        "'keras_saat.layers.', 'keras_saat.encoders.', 'keras_saat.export.'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_rest_client_runs_where_tensorflow_and_keras_cannot_be_imported(server, images):
    """Serving clients need neither: the client process refuses to import them."""
    code = f"""
import json, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "tf_keras"):
            raise ImportError("refused: " + name)
sys.meta_path.insert(0, Refuse())
from keras_saat.serving import RestClient
rows = RestClient({server.url!r}, "cap").caption([{str(images[0])!r}, b"not an image"])
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & {{"tensorflow", "keras"}})
print(json.dumps([[r["caption"], r["valid"], r["error"]] for r in rows] + [loaded]))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    *rows, loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == []
    expected = RestClient(server.url, "cap").caption([images[0]])[0]
    assert rows[0] == [expected["caption"], True, ""]
    assert rows[1][1] is False and "not an image" in rows[1][2]
