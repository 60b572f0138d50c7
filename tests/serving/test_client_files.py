"""The serving clients read image files through the bounded reader: a FIFO or a link to
/dev/zero is refused at once with an error naming the file, never read or waited on."""

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# Each client call runs in a child with a timeout, so a regression hangs nothing.
CALL = """
import sys
from keras_saat.errors import KerasSaatError
from keras_saat.serving import {client}
try:
    {client}({target!r}, "cap", timeout=5).caption([sys.argv[1]])
except KerasSaatError as err:
    print("refused:", err)
else:
    print("read")
"""
CLIENTS = [("RestClient", "http://127.0.0.1:9"), ("GrpcClient", "127.0.0.1:9")]


def _caption_in_a_child(client, target, path):
    code = CALL.format(client=client, target=target)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("client, target", CLIENTS)
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, client, target):
    fifo = tmp_path / "photo.jpg"
    os.mkfifo(fifo)
    line = _caption_in_a_child(client, target, fifo)
    assert (
        line == f"refused: cannot read image {fifo}: a FIFO, not a regular file; give an image file"
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
@pytest.mark.parametrize("client, target", CLIENTS)
def test_a_link_to_dev_zero_is_refused_without_reading_it(tmp_path, client, target):
    link = tmp_path / "photo.png"
    link.symlink_to("/dev/zero")
    line = _caption_in_a_child(client, target, link)
    assert (
        line
        == f"refused: cannot read image {link}: a device, not a regular file; give an image file"
    )


def test_a_regular_file_is_read_as_before(tmp_path):
    from keras_saat.serving.captions import read_images

    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8\xff not decoded here")
    assert read_images([path, b"raw"]) == [path.read_bytes(), b"raw"]
    with pytest.raises(FileNotFoundError):
        read_images([tmp_path / "missing.jpg"])
    with pytest.raises(IsADirectoryError, match="Is a directory"):
        read_images(tmp_path)
