"""Property-based tests: any bytes an attacker sends either decode to pixels of the right
shape or come back flagged, and the decoder never dies, inside a fixed address space.

The decoder runs in one child process whose address space is capped (RLIMIT_AS) a
little above what TensorFlow itself needs; hypothesis sends it valid, forged,
truncated and mutated PNG, JPEG, GIF and BMP files of random sizes, frame sizes and
aspect ratios. A decode that tried to allocate gigabytes would fail or kill the child.
"""

import io
import json
import struct
import subprocess
import sys
import tempfile
import textwrap
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.helpers import ROOT, cap_address_space, forged_bmp, forged_gif, forged_jpeg, forged_png

SIZE = 32
MAX_PIXELS = 4_000_000
HEADROOM = 1536 * 1024 * 1024  # bytes of address space over what TensorFlow needs at rest

WORKER = textwrap.dedent(
    f"""
    import json, resource, struct, sys
    import tensorflow as tf
    from keras_saat.images.decoding import decode_images
    decode = tf.function(lambda data: decode_images(data, {SIZE}, "crop", {MAX_PIXELS}))
    decode(tf.constant([b"x"]))
    {cap_address_space(HEADROOM)}
    print("ready", flush=True)
    stdin = sys.stdin.buffer
    while True:
        head = stdin.read(4)
        if len(head) < 4:
            break
        data = stdin.read(struct.unpack(">I", head)[0])
        pixels, valid, error = decode(tf.constant([data]))
        print(json.dumps({{"shape": pixels.shape.as_list(), "valid": bool(valid[0]),
                          "error": error[0].numpy().decode(), "finite": bool(tf.reduce_all(
                              tf.math.is_finite(pixels)))}}), flush=True)
    """
)


class Decoder:
    """The capped child process: send bytes, read back what it made of them."""

    def __init__(self):
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
        self.process.stdin.write(struct.pack(">I", len(data)) + data)
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace")[-2000:]
            pytest.fail(f"the decoder died (exit {self.process.wait(5)}) on {data[:64]!r}: {tail}")
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait(30)


@pytest.fixture(scope="module")
def decoder():
    decoder = Decoder()
    yield decoder
    decoder.close()


def _encode(fmt, width, height, seed, **options):
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    image = Image.fromarray(pixels)
    if fmt == "PNG" and seed % 2:
        image = image.convert("RGBA")
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _png_of(width, height):
    """A real PNG of any size, without holding its pixels (rows of zeros compress well)."""

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = zlib.compress((b"\x00" * (1 + 3 * width)) * height, 1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


sides = st.integers(1, 160)
huge = st.integers(1, 65535)

valid_images = st.one_of(
    st.builds(lambda w, h, s: _encode("PNG", w, h, s), sides, sides, st.integers(0, 9)),
    st.builds(lambda w, h, s: _encode("JPEG", w, h, s), sides, sides, st.integers(0, 9)),
    st.builds(lambda w, h, s: _encode("GIF", w, h, s), sides, sides, st.integers(0, 9)),
    st.builds(lambda w, h, s: _encode("BMP", w, h, s), sides, sides, st.integers(0, 9)),
    # Extreme aspect ratios: a few bytes that decode to long thin images.
    st.builds(_png_of, st.integers(1, 3), st.integers(1000, 200_000)),
    st.builds(_png_of, st.integers(1000, 200_000), st.integers(1, 3)),
)
forged_images = st.one_of(
    st.builds(forged_png, huge, huge),
    st.builds(forged_jpeg, huge, huge),
    st.builds(forged_bmp, huge, huge),
    st.builds(
        lambda w, h, screen, frames: forged_gif(w, h, screen=screen, frames=frames),
        huge,
        huge,
        st.tuples(huge, huge),
        st.integers(1, 20),
    ),
)


@st.composite
def mutated(draw, images):
    """An image cut short, or with a few bytes overwritten (headers included)."""
    data = bytearray(draw(images))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    for _ in range(draw(st.integers(0, 4))):
        if data:
            data[draw(st.integers(0, min(len(data) - 1, 64)))] = draw(st.integers(0, 255))
    return bytes(data)


def check(result):
    assert result["shape"] == [1, SIZE, SIZE, 3] and result["finite"]
    assert result["valid"] == (result["error"] == ""), result


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=valid_images)
def test_valid_images_decode(decoder, data):
    result = decoder(data)
    check(result)
    assert result["valid"], result


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(forged_images, mutated(valid_images), mutated(forged_images), st.binary()))
def test_forged_truncated_and_random_bytes_are_flagged_or_decoded(decoder, data):
    check(decoder(data))


@pytest.mark.slow
@pytest.mark.parametrize("width, height", [(1, 4000), (4000, 1), (1, 200_000), (200_000, 1)])
def test_long_thin_images_decode_inside_the_cap(decoder, width, height):
    """Scaling the shorter side up before cropping would ask for 2-770 MB here."""
    result = decoder(_png_of(width, height))
    check(result)
    assert result["valid"], result
