"""Crafted images aimed at gaps between the header walk and TensorFlow's decoders.

Each crafted input (`tests.support.crafted_images`, the bench's hostile rows) goes
through `decode_images`, the SavedModel's decode graph, in one child process whose
address space is capped (RLIMIT_AS) a little above what TensorFlow itself needs, and
each answer has a deadline: a decode that allocated the hidden frame, or spent
seconds a scan, would die or miss it.
"""

import io
import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import textwrap

import pytest
from PIL import Image

from tests.helpers import ROOT, cap_address_space, encode
from tests.support import crafted_images

SIZE = 32
HEADROOM = 640 * 1024 * 1024  # bytes of address space over what TensorFlow needs at rest
DEADLINE = 60  # seconds an answer may take once the child is ready

WORKER = textwrap.dedent(
    f"""
    import json, resource, sys
    import tensorflow as tf
    from keras_saat.images.decoding import decode_images
    decode = tf.function(lambda data: decode_images(data, {SIZE}))
    decode(tf.constant([b"x"]))
    {cap_address_space(HEADROOM)}
    print("ready", flush=True)
    for path in sys.stdin:
        _, valid, error = decode(tf.io.read_file(path.strip())[None])
        print(json.dumps({{"valid": bool(valid[0]), "error": error[0].numpy().decode()}}),
              flush=True)
    """
)


class Decoder:
    """The capped child process: send bytes (through a file), read back its answer."""

    def __init__(self, folder):
        self.folder = folder
        self.start()

    def start(self):
        """A fresh child: the first, or one after a case killed the last."""
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            cwd=ROOT,
        )
        assert self.process.stdout.readline().strip() == b"ready"

    def __call__(self, data):
        path = self.folder / "image"
        path.write_bytes(data)
        if self.process.poll() is not None:
            self.start()
        self.process.stdin.write(f"{path}\n".encode())
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], DEADLINE)
        if not ready:
            self.process.kill()
            pytest.fail(f"no answer within {DEADLINE} s on {data[:32]!r}")
        line = self.process.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace")[-2000:]
            pytest.fail(f"the decoder died (exit {self.process.wait(5)}) on {data[:32]!r}: {tail}")
        return json.loads(line)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(30)


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    decoder = Decoder(tmp_path_factory.mktemp("hostile"))
    yield decoder
    decoder.close()


def refused(decoder, data, *words):
    result = decoder(data)
    assert not result["valid"], result
    for word in words:
        assert word in result["error"], result
    return result["error"]


def test_a_frame_header_behind_a_zero_marker_is_refused(decoder):
    """libjpeg discards `FF 00` and finds the 13377x13377 frame a walk would step over."""
    refused(decoder, crafted_images.jpeg_hidden_sof(), "marker FF 00 at byte 2")


@pytest.mark.parametrize(
    "bytes_between, words",
    [
        (b"\x12\x34", ["byte 20 is not a marker"]),  # libjpeg skips them with a warning
        (b"\xff\xd8", ["marker FF D8"]),  # a second SOI
        (b"\xff\xd9", ["marker FF D9"]),  # EOI before any frame
        (b"\xff\x02\x00\x04\x00\x00", ["marker FF 02"]),  # reserved: libjpeg refuses it
        (b"\xff\xe0\x00\x01", ["marker FF E0"]),  # a segment shorter than its length field
    ],
)
def test_bytes_libjpeg_skips_or_refuses_before_the_frame_are_refused(decoder, bytes_between, words):
    jpeg = encode("JPEG")
    after = 4 + int.from_bytes(jpeg[4:6], "big")  # past SOI and the first segment (APP0)
    assert after == 20
    refused(decoder, jpeg[:after] + bytes_between + jpeg[after:], *words)


def test_a_png_whose_first_chunk_is_not_ihdr_is_refused(decoder):
    """A 64x64 private chunk first: libpng reads the 23170x23170 RGBA IHDR behind it."""
    refused(decoder, crafted_images.png_chunk_before_ihdr(), "first chunk is not a 13-byte IHDR")


def test_a_jpeg_of_many_scans_is_refused_before_its_decode(decoder):
    """10,000 scans of a 2048x2048 frame: seconds of libjpeg's time, from a 140 KB file."""
    refused(decoder, crafted_images.jpeg_many_scans(), "10006 scans", "limit of 100")


def test_one_byte_sub_blocks_are_walked_to_the_end(decoder):
    """131,072 one-byte sub-blocks: a valid 1x1 GIF, walked a window of bytes a step."""
    assert decoder(crafted_images.gif_tiny_sub_blocks()) == {"valid": True, "error": ""}


def test_a_gif_of_many_tiny_blocks_is_refused_by_the_walk_cap(decoder):
    refused(decoder, crafted_images.gif_tiny_blocks(), "GIF too complex: over 4096 steps")


@pytest.mark.slow
def test_a_100_mb_gif_is_walked_inside_the_memory_cap(decoder):
    """The walk holds the bytes once as uint8: a widened copy of 100 MB breaks the cap."""
    assert decoder(crafted_images.gif_large()) == {"valid": True, "error": ""}


@pytest.mark.parametrize(
    "name, options",
    [
        ("baseline", {}),
        ("progressive", {"progressive": True}),
        ("exif", {"exif": b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00"}),
        ("restart markers", {"restart_marker_blocks": 1}),
    ],
)
def test_real_jpegs_still_decode(decoder, name, options):
    if "restart_marker_blocks" in options and not _pillow_has_restart_markers():
        pytest.skip("this Pillow writes no restart markers")
    jpeg = encode("JPEG", size=(97, 61), **options)
    assert decoder(jpeg) == {"valid": True, "error": ""}, name
    # Fill bytes (FF FF ...) before a marker are what libjpeg allows between segments.
    after = 4 + int.from_bytes(jpeg[4:6], "big")
    filled = jpeg[:after] + b"\xff\xff\xff" + jpeg[after:]
    assert decoder(filled) == {"valid": True, "error": ""}, name


def _pillow_has_restart_markers():
    try:
        Image.new("RGB", (8, 8)).save(io.BytesIO(), "JPEG", restart_marker_blocks=1)
    except TypeError:
        return False
    return True


def _exif_jpeg(ifd_offset, segment_extra=b""):
    """A JPEG whose EXIF segment's IFD0 sits at `ifd_offset` and says orientation 6."""
    entry = b"\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00"
    tiff = b"MM\x00*" + ifd_offset.to_bytes(4, "big")
    ifd = b"\x00\x01" + entry + b"\x00\x00\x00\x00"
    body = b"Exif\x00\x00" + tiff + b"\x00" * (ifd_offset - 8) + ifd + segment_extra
    app1 = b"\xff\xe1" + (2 + len(body)).to_bytes(2, "big") + body
    jpeg = encode("JPEG", size=(40, 20))
    return jpeg[:2] + app1 + jpeg[2:]


def test_an_exif_orientation_is_read_only_inside_its_segment():
    import tensorflow as tf

    from keras_saat.images.header_checks import inspect_images

    inside = _exif_jpeg(8)
    # The same IFD with the segment's length cut short: the entry lies past its end.
    cut = bytearray(inside)
    cut[4:6] = (int.from_bytes(cut[4:6], "big") - 14).to_bytes(2, "big")
    _, _, _, orientation = inspect_images(tf.constant([inside, bytes(cut)]))
    assert orientation.numpy().tolist() == [6, 1]


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("gif", lambda: crafted_images.gif_large(100 << 20)),
        ("jpeg", lambda: b"\xff\xd8" + b"\xff\xda\x00" * (35 << 20) + b"\xff\xd9"),
    ],
)
def test_the_header_walk_of_a_100_mb_file_holds_it_once(tmp_path, name, build):
    """The walk over a 100 MB GIF (and a JPEG's scan count over 100 MB) in a child capped
    160 MiB above what it holds with the file read: the batch's map holds the file once
    more, the walk only the bytes it looks at (it held the file twice more for a GIF,
    three times for a JPEG's scans)."""
    path = tmp_path / "image"
    path.write_bytes(build())
    script = textwrap.dedent(f"""
        import tensorflow as tf
        from keras_saat.images.header_checks import inspect_images
        walk = tf.function(lambda data: inspect_images(data, 25_000_000))
        walk(tf.constant([b"GIF89a"]))
        data = tf.io.read_file({str(path)!r})[None]
        {cap_address_space(160 * 1024 * 1024)}
        ok, error, code, orientation = walk(data)
        print(bool(ok[0]), error[0].numpy().decode())
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=180, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("sub_block", [255, 254], ids=["full sub-blocks", "short sub-blocks"])
def test_the_gif_walk_alone_holds_a_few_windows_not_the_file(tmp_path, sub_block):
    """The block walk over a 100 MB GIF (`inspect_image`, one image: no batch map) in a
    child capped 16 MiB above what it holds with the file read: each step reads a few
    kilobytes (its strides and window), never a copy of the file."""
    path = tmp_path / "large.gif"
    block = bytes([sub_block]) + b"\x01" * sub_block
    head = b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x00" * 6
    head += b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\x00" + b"\x02"
    with path.open("wb") as out:
        out.write(head)
        for _ in range(100):
            out.write(block * ((1 << 20) // len(block)))
        out.write(b"\x00\x3b")
    small = head + block * 8 + b"\x00\x3b"  # the same walk, traced and run once first
    script = textwrap.dedent(f"""
        import tensorflow as tf
        from keras_saat.images.header_checks import inspect_image
        walk = tf.function(lambda data: inspect_image(data, 25_000_000))
        walk(tf.constant({small!r}))
        data = tf.io.read_file({str(path)!r})
        {cap_address_space(16 * 1024 * 1024)}
        ok, error, code, orientation = walk(data)
        print(bool(ok), error.numpy().decode())
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=180, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # Full sub-blocks are crossed 256 KB a step; short ones 1 KB a step, so the cap on
    # steps ends that walk first.
    expected = "True" if sub_block == 255 else "False GIF too complex: over 4096 steps"
    assert done.stdout.strip().startswith(expected)
