"""Image bytes -> pixels inside a serving graph, where one bad image never fails the batch.

Core TF ops only (they run in stock TF Serving). Two guards stand between a
request and `tf.io.decode_image`, whose errors would otherwise fail the whole
batch:

1. `inspect_images` reads each image's header with string ops: the format from
   the magic bytes, then the declared width and height (JPEG: the SOF segment,
   found by walking the segments; PNG: IHDR; GIF: the logical screen; BMP: the
   DIB header). Empty bytes, unknown or unsupported formats, headers too short
   to read, zero sizes, and images declaring more than `max_pixels` pixels (a
   decompression bomb allocates width x height x 3 bytes before any pixel is
   checked) are rejected here, before anything is decoded.
2. `decode_images` decodes the survivors in a `tf.data` pipeline with
   `ignore_errors()`, so a decoder error (a truncated or corrupt body) drops
   only that image. Each image carries its batch index, so the survivors are
   scattered back into place and a missing index marks the image invalid.
"""

import tensorflow as tf

from keras_saat.data.images import resize_image

FORMATS = ("JPEG", "PNG", "GIF", "BMP")
DEFAULT_MAX_PIXELS = 25_000_000  # 5000 x 5000; decoding one costs ~75 MB of uint8 and ~300 MB float
_PAD = 32  # bytes of zero padding, so header reads past the end see zeros instead of failing
_MAX_JPEG_SEGMENTS = 1024  # segments walked before the frame header; real files have < 20

# Format codes inside the graph.
_UNKNOWN, _JPEG, _PNG, _GIF, _BMP = 0, 1, 2, 3, 4
# Formats recognised by their magic bytes but not decoded by every TF Serving build.
_UNSUPPORTED = (
    (b"RIFF", 0, "WebP"),  # confirmed by "WEBP" at byte 8 below
    (b"II*\x00", 0, "TIFF"),
    (b"MM\x00*", 0, "TIFF"),
    (b"ftyp", 4, "HEIF/AVIF"),
    (b"\x00\x00\x01\x00", 0, "ICO"),
)
# JPEG start-of-frame markers: C0-CF except C4 (DHT), C8 (JPG) and CC (DAC).
_SOF_MARKERS = [m for m in range(0xC0, 0xD0) if m not in (0xC4, 0xC8, 0xCC)]


def _bytes_at(data, length, pos, count):
    """`count` bytes of `data` from `pos` as int32, zeros past the end (never an op error)."""
    pos = tf.clip_by_value(tf.cast(pos, tf.int32), 0, length)
    chunk = tf.strings.substr(data, pos, count)
    padded = tf.strings.join([chunk, tf.constant(b"\x00" * _PAD)])
    raw = tf.io.decode_raw(tf.strings.substr(padded, 0, count), tf.uint8)
    return tf.cast(tf.reshape(raw, [count]), tf.int32)


def _big_endian(values):
    out = tf.constant(0, tf.int64)
    for i in range(values.shape[0]):
        out = out * 256 + tf.cast(values[i], tf.int64)
    return out


def _little_endian(values):
    return _big_endian(tf.reverse(values, [0]))


def _jpeg_size(data, length):
    """(height, width, found) from the first SOF segment, walking from byte 2."""

    def cond(pos, height, width, state):
        return tf.logical_and(tf.equal(state, 0), pos + 4 <= length)

    def body(pos, height, width, state):
        head = _bytes_at(data, length, pos, 9)
        marker = head[1]
        is_sof = tf.reduce_any(tf.equal(marker, _SOF_MARKERS))
        standalone = tf.logical_or(
            tf.logical_and(marker >= 0xD0, marker <= 0xD7), tf.equal(marker, 0x01)
        )
        segment = tf.cast(_big_endian(head[2:4]), tf.int32)
        # state: 0 walking, 1 found the frame header, 2 not a marker (corrupt), 3 start of scan
        state = tf.where(
            tf.not_equal(head[0], 0xFF),
            2,
            tf.where(is_sof, 1, tf.where(tf.equal(marker, 0xDA), 3, 0)),
        )
        height = tf.where(is_sof, _big_endian(head[5:7]), height)
        width = tf.where(is_sof, _big_endian(head[7:9]), width)
        step = tf.where(
            tf.equal(marker, 0xFF), 1, tf.where(standalone, 2, 2 + tf.maximum(segment, 2))
        )
        return pos + step, height, width, state

    zero = tf.constant(0, tf.int64)
    _, height, width, state = tf.while_loop(
        cond,
        body,
        (tf.constant(2), zero, zero, tf.constant(0)),
        maximum_iterations=_MAX_JPEG_SEGMENTS,
    )
    return height, width, tf.equal(state, 1)


def _inspect_one(data, max_pixels):
    """(valid, error, format code) for one image's bytes, reading only the header."""
    length = tf.strings.length(data)
    head = _bytes_at(data, length, 0, 26)

    def starts(magic, offset=0):
        expected = tf.constant(list(magic), tf.int32)
        return tf.reduce_all(tf.equal(head[offset : offset + len(magic)], expected))

    is_jpeg = starts(b"\xff\xd8\xff")
    is_png = starts(b"\x89PNG\r\n\x1a\n")
    is_gif = tf.logical_or(starts(b"GIF87a"), starts(b"GIF89a"))
    is_bmp = starts(b"BM")
    code = tf.where(
        is_jpeg,
        _JPEG,
        tf.where(is_png, _PNG, tf.where(is_gif, _GIF, tf.where(is_bmp, _BMP, _UNKNOWN))),
    )

    jpeg_h, jpeg_w, jpeg_found = tf.cond(
        is_jpeg,
        lambda: _jpeg_size(data, length),
        lambda: (tf.constant(0, tf.int64), tf.constant(0, tf.int64), tf.constant(False)),
    )
    bmp_core = tf.equal(_little_endian(head[14:18]), 12)  # OS/2 BITMAPCOREHEADER: 16-bit sizes
    bmp_w = tf.where(bmp_core, _little_endian(head[18:20]), _little_endian(head[18:22]))
    bmp_h = tf.where(bmp_core, _little_endian(head[20:22]), _little_endian(head[22:26]))
    bmp_h = tf.where(bmp_h >= 2**31, 2**32 - bmp_h, bmp_h)  # top-down BMPs store -height
    height = tf.gather(
        tf.stack([tf.constant(0, tf.int64), jpeg_h, _big_endian(head[20:24]),
                  _little_endian(head[8:10]), bmp_h]),
        code,
    )  # fmt: skip
    width = tf.gather(
        tf.stack([tf.constant(0, tf.int64), jpeg_w, _big_endian(head[16:20]),
                  _little_endian(head[6:8]), bmp_w]),
        code,
    )  # fmt: skip
    header_bytes = tf.gather(tf.constant([0, 0, 24, 10, 26]), code)

    unsupported = tf.constant("")
    for magic, offset, name in reversed(_UNSUPPORTED):
        match = starts(magic, offset)
        if name == "WebP":
            match = tf.logical_and(match, starts(b"WEBP", 8))
        unsupported = tf.where(match, name, unsupported)

    pixels = height * width
    size_text = tf.strings.join(
        [tf.strings.as_string(width), "x", tf.strings.as_string(height), " pixels"]
    )
    format_name = tf.gather(tf.constant(["", *FORMATS]), code)
    supported = ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]
    checks = [
        (tf.equal(length, 0), tf.constant("empty image bytes")),
        (
            tf.not_equal(unsupported, ""),
            tf.strings.join(["unsupported image format ", unsupported, f"; send {supported}"]),
        ),
        (
            tf.equal(code, _UNKNOWN),
            tf.constant(f"not an image: the bytes do not start like {supported}"),
        ),
        (
            tf.logical_and(tf.equal(code, _JPEG), tf.logical_not(jpeg_found)),
            tf.constant("corrupt or truncated JPEG: no frame header before the image data"),
        ),
        (
            length < header_bytes,
            tf.strings.join(["truncated ", format_name, " header"]),
        ),
        (
            tf.logical_or(tf.equal(height, 0), tf.equal(width, 0)),
            tf.strings.join([format_name, " header declares a zero width or height"]),
        ),
        (
            pixels > max_pixels,
            tf.strings.join(
                [
                    "image too large: the ",
                    format_name,
                    " header declares ",
                    size_text,
                    ", over the limit of ",
                    tf.strings.as_string(max_pixels),
                    " (export --max-pixels); send a smaller image",
                ]
            ),
        ),
    ]
    error = tf.constant("")
    for failed, message in reversed(checks):
        error = tf.where(failed, message, error)
    return tf.equal(error, ""), error, code


def inspect_images(image_bytes, max_pixels=DEFAULT_MAX_PIXELS):
    """Header checks for a batch of encoded images, without decoding them.

    Args:
        image_bytes: (B,) string tensor of encoded images.
        max_pixels: int. Largest width x height accepted. Defaults to DEFAULT_MAX_PIXELS.

    Returns:
        (valid (B,) bool, error (B,) string: "" when valid).
    """
    max_pixels = tf.constant(int(max_pixels), tf.int64)
    valid, error, _ = tf.map_fn(
        lambda data: _inspect_one(data, max_pixels),
        image_bytes,
        fn_output_signature=(tf.bool, tf.string, tf.int32),
    )
    return valid, error


def decode_images(image_bytes, size, resize="crop", max_pixels=DEFAULT_MAX_PIXELS):
    """Decodes and resizes a batch of encoded images; bad ones become zeros.

    Args:
        image_bytes: (B,) string tensor: JPEG, PNG, GIF (first frame) or BMP bytes.
        size: int. Output side.
        resize: str. "crop", "pad" or "stretch" (see `keras_saat.data.images.resize_image`).
            Defaults to "crop".
        max_pixels: int. Largest declared width x height decoded. Defaults to DEFAULT_MAX_PIXELS.

    Returns:
        (pixels (B, size, size, 3) float32 in [0, 255], valid (B,) bool, error (B,) string).
    """
    image_bytes = tf.reshape(image_bytes, [-1])
    batch = tf.shape(image_bytes, out_type=tf.int64)[0]
    header_ok, error = inspect_images(image_bytes, max_pixels)

    def decode(index, data):
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
        image.set_shape([None, None, 3])
        return index, resize_image(image, size, resize)

    decoded = (
        tf.data.Dataset.from_tensor_slices((tf.range(batch), image_bytes, header_ok))
        .filter(lambda index, data, ok: ok)
        .map(lambda index, data, ok: decode(index, data), num_parallel_calls=tf.data.AUTOTUNE)
        .ignore_errors()
    )
    # A sentinel that always decodes, so the batch below is never empty.
    sentinel = tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), tf.zeros([size, size, 3])))
    indices, images = decoded.concatenate(sentinel).batch(batch + 1).get_single_element()
    keep = indices >= 0
    indices = tf.boolean_mask(indices, keep)[:, None]  # (n, 1)
    pixels = tf.scatter_nd(indices, tf.boolean_mask(images, keep), [batch, size, size, 3])
    decoded_ok = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.bool), [batch])
    failed = tf.logical_and(header_ok, tf.logical_not(decoded_ok))
    format_error = tf.constant("cannot decode the image: its data is truncated or corrupt")
    error = tf.where(failed, format_error, error)
    return pixels, decoded_ok, error
