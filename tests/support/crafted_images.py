"""Crafted images for the hostile-input tests and the bench's hostile part.

Each builder returns a few hundred kilobytes at most, built in milliseconds, aimed at
a gap between what the header walk (`keras_saat.images.header_checks`) reads and what
TensorFlow's decoder does; each `CASES` row hands one to `decode_images`, the graph
the SavedModel serves, and returns its per-item error.
"""

import io
import struct
import zlib

import numpy as np

from tests.support.hostile_cases import HostileCase


def _pil(fmt, width, height, mode="RGB", seed=0, **options):
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, fmt, **options)
    return buffer.getvalue()


def _segments(jpeg):
    """(marker, start, end) of each segment of `jpeg` before its first scan's data."""
    found, pos = [], 2
    while True:
        marker = jpeg[pos + 1]
        end = pos + 2 + struct.unpack(">H", jpeg[pos + 2 : pos + 4])[0]
        found.append((marker, pos, end))
        if marker == 0xDA:
            return found
        pos = end


def _with_frame_size(jpeg, width, height):
    data = bytearray(jpeg)
    for marker, start, _ in _segments(jpeg):
        if marker in (0xC0, 0xC1, 0xC2):
            data[start + 5 : start + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def jpeg_hidden_sof(side=13377):
    """A 64x64 JPEG behind a `FF 00 LL LL` pseudo-segment that holds a side x side frame.

    A walk that reads `FF 00` as a segment skips LL LL bytes to the decoy's frame
    header; libjpeg discards `FF 00` and scans on to the hidden frame header.
    """
    hidden = _with_frame_size(_pil("JPEG", 16, 16, mode="L"), side, side)[2:-2]  # no SOI, EOI
    decoy = _pil("JPEG", 64, 64, mode="L")
    return b"\xff\xd8\xff\x00" + struct.pack(">H", 2 + len(hidden)) + hidden + decoy[2:]


def _png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_chunk_before_ihdr(side=23170):
    """A PNG whose first chunk is a private one shaped like a 64x64 IHDR; the real IHDR
    behind it declares side x side RGBA."""
    decoy = struct.pack(">IIBBBBB", 64, 64, 8, 6, 0, 0, 0)
    header = struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (1 + 4 * side) * 16, 9)  # a few rows: the rest is missing
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"prVt", decoy)
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", rows)
        + _png_chunk(b"IEND", b"")
    )


def jpeg_many_scans(scans=10_000, side=2048):
    """A side x side progressive JPEG whose last scan header is repeated `scans` times.

    Each repeated scan holds one byte of data: libjpeg walks every block of the frame
    for each, so the decode's time grows with the scan count, not the file's size.
    """
    jpeg = _pil("JPEG", side // 8, side // 8, mode="L", progressive=True)
    jpeg = _with_frame_size(jpeg, side, side)
    last = jpeg.rfind(b"\xff\xda")
    header = jpeg[last : last + 2 + struct.unpack(">H", jpeg[last + 2 : last + 4])[0]]
    return jpeg[:-2] + (header + b"\x00") * scans + b"\xff\xd9"


def gif_tiny_sub_blocks(size=262_144):
    """A 1x1 GIF whose image data is `size` bytes of one-byte sub-blocks (two bytes each)."""
    screen = struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x00" * 6  # two colours
    frame = b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\x00" + b"\x02"
    return b"GIF89a" + screen + frame + b"\x01\x00" * (size // 2) + b"\x00\x3b"


def gif_tiny_blocks(size=262_144):
    """A 1x1 GIF followed by `size` bytes of comment extensions of one 1-byte sub-block each."""
    screen = struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x00" * 6
    frame = b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\x00" + b"\x02\x02\x4c\x01\x00"
    return b"GIF89a" + screen + frame + b"\x21\xfe\x01\x00\x00" * (size // 5) + b"\x3b"


def gif_large(size=100 << 20):
    """A 1x1 GIF of `size` bytes: one frame whose data is 255-byte sub-blocks."""
    screen = struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x00" * 6
    frame = b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\x00" + b"\x02"
    blocks = (b"\xff" + b"\x00" * 255) * (size // 256)
    return b"GIF89a" + screen + frame + blocks + b"\x00\x3b"


def jpeg_truncated(side=5000):
    """A side x side JPEG cut to a tenth of its data, its EOI kept."""
    jpeg = _pil("JPEG", side // 16, side // 16, mode="RGB")
    jpeg = _with_frame_size(jpeg, side, side)
    return jpeg[: len(jpeg) // 10] + b"\xff\xd9"


def bmp_short_data(side=4000):
    """A 24-bit BMP that declares side x side pixels and holds 16 bytes of them."""
    info = struct.pack("<IiiHHIIiiII", 40, side, -side, 1, 24, 0, 0, 0, 0, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54 + 16, 0, 0, 54) + info + b"\x00" * 16


def decode_one(data, max_pixels=None):
    """`data` through `decode_images` (the SavedModel's decode graph): its per-item error."""
    import tensorflow as tf

    from keras_saat.images.decoding import decode_images
    from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS

    max_pixels = max_pixels or DEFAULT_MAX_PIXELS
    decode = tf.function(lambda batch: decode_images(batch, 32, "crop", max_pixels))
    _, _, error = decode(tf.constant([data]))
    return error[0].numpy().decode()


def _case(name, build, bound):
    return HostileCase(name, "export graph", bound, lambda scratch: decode_one(build()))


CASES = [
    _case("jpeg_hidden_sof", jpeg_hidden_sof, "refused: a marker libjpeg would skip"),
    _case("png_chunk_before_ihdr", png_chunk_before_ihdr, "refused: first chunk not IHDR"),
    _case("jpeg_many_scans", jpeg_many_scans, "refused: over the scan cap"),
    _case("gif_tiny_sub_blocks", gif_tiny_sub_blocks, "header walk in well under a second"),
    _case("gif_tiny_blocks", gif_tiny_blocks, "refused: over the walk's step cap"),
    _case("gif_100mb", gif_large, "header walk in about the bytes' size"),
    _case("jpeg_truncated", jpeg_truncated, "decoded (a grey tail)"),
    _case("bmp_short_data", bmp_short_data, "refused: data shorter than declared"),
]
