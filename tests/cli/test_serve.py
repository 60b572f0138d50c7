"""`keras-saat serve`: what it prints once the server listens."""

from types import SimpleNamespace

from keras_saat.cli.serve import banner


def test_the_banner_names_the_page_and_the_rest_url():
    server = SimpleNamespace(
        name="cap", version=1, path="/m/cap/1", url="http://127.0.0.1:8501",
        host="127.0.0.1", grpc_port=None,
    )  # fmt: skip
    lines = banner(server).splitlines()
    assert lines[1:3] == [
        "  page http://127.0.0.1:8501/",
        "  REST http://127.0.0.1:8501/v1/models/cap",
    ]
    assert not any("gRPC" in line for line in lines)
    server.grpc_port = 8500
    assert "  gRPC 127.0.0.1:8500" in banner(server).splitlines()
