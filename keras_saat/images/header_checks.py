"""What an encoded image will cost to decode, read from its header with string ops.

Core TF ops only, so the checks run inside the exported graph (stock TF Serving). An image
is refused before any pixel is decoded when its header is empty, unsupported, truncated,
over `max_pixels`, or laid out so that the decoder could read another frame than the
header walk (`inspect_image`'s checks say each case and its message).
"""

import tensorflow as tf

from keras_saat.images import jpeg_header as jpeg
from keras_saat.images.gif_header import MAX_GIF_STEPS, gif_frames, not_a_gif
from keras_saat.images.header_bytes import big_endian, bytes_at, little_endian
from keras_saat.images.image_formats import (
    BMP,
    DEFAULT_MAX_PIXELS,
    FORMATS,
    GIF,
    JPEG,
    PNG,
    SIGNATURES,
    UNKNOWN,
)

# Formats recognised by their magic bytes but not decoded by every TF Serving build.
_UNSUPPORTED = (
    (b"RIFF", 0, "WebP"),  # confirmed by "WEBP" at byte 8 below
    (b"II*\x00", 0, "TIFF"),
    (b"MM\x00*", 0, "TIFF"),
    (b"ftyp", 4, "HEIF/AVIF"),
    (b"\x00\x00\x01\x00", 0, "ICO"),
)
_PNG_IHDR = b"\x00\x00\x00\x0dIHDR"  # the first chunk: IHDR, 13 bytes long
_HEX = [f"{value:02X}" for value in range(256)]


# tf.cond and tf.while_loop throughout, so tracing skips AutoGraph's slow conversion.
@tf.autograph.experimental.do_not_convert
def inspect_image(data, max_pixels=DEFAULT_MAX_PIXELS):
    """Header checks for one encoded image, without decoding it.

    Args:
        data: scalar string tensor.
        max_pixels: int or int64 tensor. Largest width x height decoded (and, for GIF,
            largest total area of its frames). Defaults to DEFAULT_MAX_PIXELS.

    Returns:
        (valid bool, error string ("" when valid), format code int32 (UNKNOWN, JPEG, PNG,
        GIF or BMP), EXIF orientation int32 (1 = upright; JPEG only)).
    """
    max_pixels = tf.cast(max_pixels, tf.int64)
    length = tf.strings.length(data)
    head = bytes_at(data, length, 0, 30)

    def starts(magic, offset=0):
        expected = tf.constant(list(magic), tf.int32)
        return tf.reduce_all(tf.equal(head[offset : offset + len(magic)], expected))

    is_jpeg, is_png, is_gif, is_bmp = (
        tf.reduce_any([starts(magic) for magic in SIGNATURES[code]])
        for code in (JPEG, PNG, GIF, BMP)
    )
    code = tf.where(
        is_jpeg,
        JPEG,
        tf.where(is_png, PNG, tf.where(is_gif, GIF, tf.where(is_bmp, BMP, UNKNOWN))),
    )
    zero = tf.constant(0, tf.int64)

    jpeg_head = tf.cond(is_jpeg, lambda: jpeg.jpeg_header(data, length), jpeg.not_a_jpeg)
    jpeg_scans = tf.cond(is_jpeg, lambda: jpeg.jpeg_scans(data), lambda: tf.constant(0))
    orientation = tf.cond(
        jpeg_head.exif >= 0,
        lambda: jpeg.exif_orientation(data, length, jpeg_head.exif),
        lambda: tf.constant(1),
    )
    gif = tf.cond(is_gif, lambda: gif_frames(data, length), not_a_gif)
    # BMP: TensorFlow reads signed 32-bit width and height at bytes 18 and 22 whatever the
    # DIB header's kind, and takes the height's absolute value (top-down rows).
    bmp_w = little_endian(head[18:22])
    bmp_w = tf.where(bmp_w >= 2**31, zero, bmp_w)  # a negative width: refused as zero
    bmp_h = little_endian(head[22:26])
    bmp_h = tf.where(bmp_h >= 2**31, 2**32 - bmp_h, bmp_h)
    height = tf.gather(
        tf.stack([zero, jpeg_head.height, big_endian(head[20:24]), gif.height, bmp_h]), code
    )
    width = tf.gather(
        tf.stack([zero, jpeg_head.width, big_endian(head[16:20]), gif.width, bmp_w]), code
    )
    header_bytes = tf.gather(tf.constant([0, 0, 24, 13, 26]), code)

    unsupported = tf.constant("")
    for magic, offset, name in reversed(_UNSUPPORTED):
        match = starts(magic, offset)
        if name == "WebP":
            match = tf.logical_and(match, starts(b"WEBP", 8))
        unsupported = tf.where(match, name, unsupported)

    pixels = height * width
    size_text = _join(width, "x", height, " pixels")
    format_name = tf.gather(tf.constant(["", *FORMATS]), code)
    supported = ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]
    limit = _join(", over the limit of ", max_pixels, " (export.max_pixels); ")
    checks = [
        (tf.equal(length, 0), tf.constant("empty image bytes")),
        (
            tf.not_equal(unsupported, ""),
            _join("unsupported image format ", unsupported, f"; send {supported}"),
        ),
        (
            tf.equal(code, UNKNOWN),
            tf.constant(f"not an image: the bytes do not start like {supported}"),
        ),
        (
            tf.logical_and(is_jpeg, tf.equal(jpeg_head.state, jpeg.NOT_A_MARKER)),
            _join(
                "corrupt JPEG: byte ",
                jpeg_head.position,
                " is not a marker where the header expects one; send the image re-encoded",
            ),
        ),
        (
            tf.logical_and(is_jpeg, tf.equal(jpeg_head.state, jpeg.REFUSED_MARKER)),
            _join(
                "corrupt JPEG: marker FF ",
                tf.gather(tf.constant(_HEX), jpeg_head.marker),
                " at byte ",
                jpeg_head.position,
                " is one the decoder skips or refuses; send the image re-encoded",
            ),
        ),
        (
            tf.logical_and(is_jpeg, tf.not_equal(jpeg_head.state, jpeg.FRAME_HEADER)),
            tf.constant("corrupt or truncated JPEG: no frame header before the image data"),
        ),
        (length < header_bytes, _join("truncated ", format_name, " header")),
        (
            tf.logical_and(is_png, tf.logical_not(starts(_PNG_IHDR, 8))),
            tf.constant(
                "corrupt PNG: its first chunk is not a 13-byte IHDR (the decoder would read "
                "its size from a later one); send the image re-encoded"
            ),
        ),
        (
            jpeg_scans > jpeg.MAX_JPEG_SCANS,
            _join(
                "JPEG too complex: ",
                jpeg_scans,
                f" scans (FF DA markers), over the limit of {jpeg.MAX_JPEG_SCANS}; "
                "send it re-encoded as baseline or with fewer scans",
            ),
        ),
        (
            tf.logical_and(is_gif, tf.logical_not(gif.complete)),
            tf.constant(
                f"GIF too complex: over {MAX_GIF_STEPS} steps of the header walk (blocks, "
                "and runs of sub-blocks); send a smaller image or fewer frames"
            ),
        ),
        (
            tf.logical_and(is_gif, tf.equal(gif.frames, 0)),
            tf.constant("corrupt or truncated GIF: no image frame"),
        ),
        (
            tf.logical_or(tf.equal(height, 0), tf.equal(width, 0)),
            _join(format_name, " header declares a zero width or height"),
        ),
        (
            pixels > max_pixels,
            _join(
                "image too large: the ",
                format_name,
                " header declares ",
                size_text,
                limit,
                "send a smaller image",
            ),
        ),
        (
            tf.logical_and(is_gif, gif.area > max_pixels),
            _join(
                "image too large: the GIF's ",
                gif.frames,
                " frames hold ",
                gif.area,
                " pixels in all",
                limit,
                "send its first frame alone",
            ),
        ),
    ]
    error = tf.constant("")
    for failed, message in reversed(checks):
        error = tf.where(failed, message, error)
    return tf.equal(error, ""), error, code, orientation


def _join(*parts):
    """One string tensor of `parts`: strings and string tensors as they are, numbers as text."""
    return tf.strings.join(
        [
            p if isinstance(p, str) or p.dtype == tf.string else tf.strings.as_string(p)
            for p in parts
        ]
    )


def inspect_images(image_bytes, max_pixels=DEFAULT_MAX_PIXELS):
    """`inspect_image` over a (B,) string tensor: (valid, error, format, orientation), each
    (B,)."""
    max_pixels = tf.constant(int(max_pixels), tf.int64)
    return tf.map_fn(
        lambda data: inspect_image(data, max_pixels),
        image_bytes,
        fn_output_signature=(tf.bool, tf.string, tf.int32, tf.int32),
    )
