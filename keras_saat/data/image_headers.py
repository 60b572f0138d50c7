"""What an encoded image will cost to decode, read from its header with string ops.

Core TF ops only, so the checks run inside the exported graph (stock TF Serving).
`inspect_image` reads, for the bytes that `keras_saat.data.images` will decode:

- the format, from the magic bytes (JPEG, PNG, GIF, BMP; WebP, TIFF, HEIF/AVIF and
  ICO are named and refused);
- the size the decoder will allocate, from the header that decoder reads: JPEG's
  first frame header (SOF, found by walking the segments as libjpeg does), PNG's
  IHDR (which must be the first chunk), BMP's 32-bit DIB fields, and for GIF every
  frame's image descriptor, because TensorFlow decodes a GIF onto a canvas as large
  as its largest frame (the logical-screen size is ignored) after reading every
  frame's raster into memory;
- a JPEG's scan count, bounded by its FF DA pairs: libjpeg's time is the frame's
  blocks once a scan;
- a JPEG's EXIF orientation (1-8), so the image can be turned upright in the graph.

An image is refused before any pixel is decoded when it is empty, of an unknown or
unsupported format, too short to hold its header, of zero size, when its decode
would exceed `max_pixels` (the canvas, and for GIF also the frames' total area), when
a JPEG holds bytes or markers before its frame header that libjpeg would skip or
refuse (there the walk and libjpeg could read different frames) or over
_MAX_JPEG_SCANS scans, when a PNG's first chunk is not IHDR, and when a GIF's walk
needs over _MAX_GIF_STEPS steps. The walk's cost: a JPEG's at most
_MAX_JPEG_SEGMENTS segments plus one pass over its bytes, a GIF's at most
_MAX_GIF_STEPS steps over its bytes held once as uint8.
"""

import tensorflow as tf

FORMATS = ("JPEG", "PNG", "GIF", "BMP")
DEFAULT_MAX_PIXELS = 25_000_000  # 5000 x 5000: 75 MB of uint8 pixels at most per image
_PAD = 32  # bytes of zero padding, so header reads past the end see zeros instead of failing
_MAX_JPEG_SEGMENTS = 1024  # segments walked before the frame header; real files have < 20
# Scans (FF DA pairs) in a JPEG: libjpeg walks every block of the frame once a scan, so
# the decode's time is the frame's blocks times this. Encoders write 1 (baseline) to
# about 10 (progressive); 100 holds a max_pixels frame's decode to about a second of scans.
_MAX_JPEG_SCANS = 100
# Steps of the GIF walk: one a block (extension or frame: an animation has 2 a frame),
# and one a run of sub-blocks, which crosses up to _GIF_STRIDES full (255-byte) ones
# and then _GIF_WINDOW bytes of any. A step costs about 0.1-0.3 ms of one CPU core,
# so the walk ends within about a second whatever the bytes; real files need up to
# 3 steps a frame (so at most about 1,300 frames), plus 1 a 256 KB of image data.
_MAX_GIF_STEPS = 1 << 12
_GIF_STRIDES = 1024
_GIF_HOPS = 3  # sub-blocks crossed one by one before a run counts as a step
_GIF_WINDOW = 1024  # a power of 2
_MAX_EXIF_ENTRIES = 32  # IFD0 entries searched for the orientation tag

# Format codes inside the graph.
UNKNOWN, JPEG, PNG, GIF, BMP = 0, 1, 2, 3, 4
# The magic bytes each decoded format starts with.
SIGNATURES = {
    JPEG: (b"\xff\xd8\xff",),
    PNG: (b"\x89PNG\r\n\x1a\n",),
    GIF: (b"GIF87a", b"GIF89a"),
    BMP: (b"BM",),
}
# Formats recognised by their magic bytes but not decoded by every TF Serving build.
_UNSUPPORTED = (
    (b"RIFF", 0, "WebP"),  # confirmed by "WEBP" at byte 8 below
    (b"II*\x00", 0, "TIFF"),
    (b"MM\x00*", 0, "TIFF"),
    (b"ftyp", 4, "HEIF/AVIF"),
    (b"\x00\x00\x01\x00", 0, "ICO"),
)
# JPEG markers as libjpeg's `read_markers` takes them before the first frame header: the
# start-of-frame markers (C0-CF but C4 DHT, C8 JPG, CC DAC; libjpeg refuses the kinds
# it does not decode, before allocating), the segments it reads or skips by their
# length (DHT, DAC, DNL, DQT, DRI, APP0-APP15, COM) and the standalone ones (RST0-7,
# TEM). Any other marker (00, SOI, EOI, JPG, JPGn, reserved ones) is one libjpeg
# discards or refuses, and the walk refuses it too.
_SOF_MARKERS = [m for m in range(0xC0, 0xD0) if m not in (0xC4, 0xC8, 0xCC)]
_SEGMENT_MARKERS = [0xC4, 0xCC, 0xDB, 0xDC, 0xDD, *range(0xE0, 0xF0), 0xFE]
_STANDALONE_MARKERS = [*range(0xD0, 0xD8), 0x01]
_EXIF_ORIENTATION_TAG = 0x0112
_PNG_IHDR = b"\x00\x00\x00\x0dIHDR"  # the first chunk: IHDR, 13 bytes long
_HEX = [f"{value:02X}" for value in range(256)]


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


def _jpeg_header(data, length):
    """(height, width, state, position, marker, exif position) from the segments before the
    first SOF.

    The walk moves as libjpeg's `read_markers` does, and stops (state 2 or 4) where libjpeg
    would skip bytes or refuse a marker, because there the two could part: libjpeg's
    `next_marker` discards any byte that is not FF and every `FF 00` pair, so a
    walk that stepped over them as a segment could read a decoy frame header.
    The EXIF position is that of the first APP1 segment holding "Exif\\0\\0" (-1: none).
    """

    def cond(pos, height, width, state, marker, exif):
        return tf.logical_and(tf.equal(state, 0), pos + 4 <= length)

    def body(pos, height, width, state, marker, exif):
        head = _bytes_at(data, length, pos, 10)
        marker = head[1]
        is_sof = tf.reduce_any(tf.equal(marker, _SOF_MARKERS))
        standalone = tf.reduce_any(tf.equal(marker, _STANDALONE_MARKERS))
        segment = tf.cast(_big_endian(head[2:4]), tf.int32)
        skipped = tf.logical_and(tf.reduce_any(tf.equal(marker, _SEGMENT_MARKERS)), segment >= 2)
        # state: 0 walking, 1 found the frame header, 2 not a marker (libjpeg skips the
        # byte), 3 start of scan, 4 a marker libjpeg discards or refuses here
        state = tf.where(
            tf.not_equal(head[0], 0xFF),
            2,
            tf.where(
                is_sof,
                1,
                tf.where(
                    tf.equal(marker, 0xDA),
                    3,
                    tf.where(skipped | standalone | tf.equal(marker, 0xFF), 0, 4),
                ),
            ),
        )
        height = tf.where(is_sof, _big_endian(head[5:7]), height)
        width = tf.where(is_sof, _big_endian(head[7:9]), width)
        exif_tag = tf.reduce_all(tf.equal(head[4:10], tf.constant(list(b"Exif\x00\x00"))))
        is_exif = tf.logical_and(tf.equal(marker, 0xE1), exif_tag)
        exif = tf.where(tf.logical_and(is_exif, exif < 0), pos, exif)
        step = tf.where(tf.equal(marker, 0xFF), 1, tf.where(standalone, 2, 2 + segment))
        step = tf.where(tf.equal(state, 0), step, 0)  # a stop keeps its position for the error
        return pos + step, height, width, state, marker, exif

    zero = tf.constant(0, tf.int64)
    pos, height, width, state, marker, exif = tf.while_loop(
        cond,
        body,
        (tf.constant(2), zero, zero, tf.constant(0), tf.constant(0), tf.constant(-1)),
        maximum_iterations=_MAX_JPEG_SEGMENTS,
    )
    return height, width, state, pos, marker, exif


def _jpeg_scans(data):
    """How many `FF DA` (start of scan) pairs `data` holds: at least its scan count.

    Inside entropy-coded data an FF is always followed by 00 or a restart marker, so
    every scan libjpeg decodes is counted; a pair inside a segment (an EXIF thumbnail)
    only adds to the count.
    """
    raw = tf.io.decode_raw(data, tf.uint8)
    pairs = tf.logical_and(tf.equal(raw[:-1], 0xFF), tf.equal(raw[1:], 0xDA))
    return tf.reduce_sum(tf.cast(pairs, tf.int32))


def _exif_orientation(data, length, exif):
    """The orientation tag (1-8) of the EXIF segment at `exif`; 1 when absent or unreadable."""
    tiff = exif + 10  # marker (2), length (2), "Exif\0\0" (6)
    order = _bytes_at(data, length, tiff, 2)
    little = tf.reduce_all(tf.equal(order, tf.constant(list(b"II"))))

    def number(values):
        return tf.where(little, _little_endian(values), _big_endian(values))

    ifd = tf.cast(tf.minimum(number(_bytes_at(data, length, tiff + 4, 4)), 2**30), tf.int32)
    count = number(_bytes_at(data, length, tiff + ifd, 2))
    entries = tf.reshape(
        _bytes_at(data, length, tiff + ifd + 2, 12 * _MAX_EXIF_ENTRIES), [_MAX_EXIF_ENTRIES, 12]
    )
    tags = tf.where(
        little, entries[:, 0] + 256 * entries[:, 1], 256 * entries[:, 0] + entries[:, 1]
    )
    values = tf.where(
        little, entries[:, 8] + 256 * entries[:, 9], 256 * entries[:, 8] + entries[:, 9]
    )  # a SHORT, left-justified in the entry's 4-byte value field
    listed = tf.range(_MAX_EXIF_ENTRIES, dtype=tf.int64) < count
    # The IFD's offset and count are declared: an entry counts only inside the segment.
    segment_end = tf.cast(exif, tf.int64) + 2 + _big_endian(_bytes_at(data, length, exif + 2, 2))
    entry_end = (
        tf.cast(tiff, tf.int64) + tf.cast(ifd, tf.int64) + 2
        + 12 * tf.range(1, _MAX_EXIF_ENTRIES + 1, dtype=tf.int64)
    )  # fmt: skip
    inside = tf.logical_and(entry_end <= segment_end, ifd >= 8)  # past the TIFF header
    match = tf.logical_and(tf.equal(tags, _EXIF_ORIENTATION_TAG), listed & inside)
    value = tf.reduce_max(tf.where(match, values, 0))
    readable = tf.logical_and(exif >= 0, tf.reduce_any(match))
    return tf.where(tf.logical_and(readable, (value >= 1) & (value <= 8)), value, 1)


def _gif_frames(data, length):
    """(canvas height, canvas width, frames' total area, frames, complete) over every frame.

    Walks the blocks after the global colour table: extensions and image descriptors,
    each followed by data sub-blocks. `complete` is False when the walk hit its block
    limit before the trailer or the end of the data.

    The bytes are held once, as uint8 (only gathered values are widened), and a run of
    sub-blocks is crossed _GIF_WINDOW bytes a step by pointer doubling, so the walk's
    steps are its blocks plus its bytes / _GIF_WINDOW, whatever the sub-blocks' sizes.
    """
    raw = tf.io.decode_raw(data, tf.uint8)
    last = length - 1

    def at(positions):
        """The bytes at `positions` as int32, zeros past the end."""
        values = tf.cast(tf.gather(raw, tf.minimum(positions, last)), tf.int32)
        return tf.where(positions < length, values, 0)

    flags = at(tf.constant(10))
    table = tf.where(flags >= 128, 3 * tf.bitwise.left_shift(2, flags % 8), 0)
    offsets = tf.range(10)
    window = tf.range(_GIF_WINDOW)
    beyond = tf.range(_GIF_WINDOW, _GIF_WINDOW + 256)  # where a hop leaves the window
    strides = 256 * tf.range(_GIF_STRIDES)

    def skip_sub_blocks(pos, budget):
        """Past the sub-blocks at `pos` (a size byte each, 0 ends them; the end of the
        data ends them too), a step at a time from `budget`."""

        def cond(pos, budget, done):
            return tf.logical_not(done) & (budget > 0)

        def body(pos, budget, done):
            # Encoders write full 255-byte sub-blocks: cross the leading run of them.
            full = tf.cast(tf.equal(at(pos + strides), 255), tf.int32)
            pos = pos + 256 * tf.reduce_sum(tf.math.cumprod(full))
            sizes = at(pos + window)
            # Each offset's next sub-block; a terminator (size 0) and an offset past the
            # window lead to themselves, so doubling the table log2(window) times takes
            # offset 0 to its run's terminator or to the first sub-block past the window.
            hops = tf.concat([tf.where(tf.equal(sizes, 0), window, window + sizes + 1), beyond], 0)
            for _ in range(_GIF_WINDOW.bit_length() - 1):
                hops = tf.gather(hops, hops)
            end = hops[0]
            done = end < _GIF_WINDOW
            return pos + end + tf.cast(done, tf.int32), budget - 1, done

        pos, budget, _ = tf.while_loop(cond, body, (pos, budget, tf.constant(False)))
        return pos, budget

    def cond(pos, budget, height, width, area, frames, state):
        return (tf.equal(state, 0)) & (pos < length) & (budget > 0)

    def body(pos, budget, height, width, area, frames, state):
        head = at(pos + offsets)
        kind = head[0]  # an extension (0x21 label), an image (0x2C) or the trailer (0x3B)
        is_image = tf.equal(kind, 0x2C)
        frame_w = _little_endian(head[5:7])
        frame_h = _little_endian(head[7:9])
        local = tf.where(head[9] >= 128, 3 * tf.bitwise.left_shift(2, head[9] % 8), 0)
        known = tf.logical_or(is_image, tf.equal(kind, 0x21))
        height = tf.where(is_image, tf.maximum(height, frame_h), height)
        width = tf.where(is_image, tf.maximum(width, frame_w), width)
        area = tf.where(is_image, area + frame_h * frame_w, area)
        frames = tf.where(is_image, frames + 1, frames)
        # state: 0 walking, 1 trailer, 2 an unknown block (the decoder refuses it)
        state = tf.where(tf.equal(kind, 0x3B), 1, tf.where(known, 0, 2))
        header = tf.where(is_image, 11 + local, 2)  # an image's + its LZW code size byte
        # Extensions hold one or two short sub-blocks: hop over those without a loop.
        pos = pos + header
        ended = tf.logical_not(known)
        for _ in range(_GIF_HOPS):
            size = at(pos)
            stop = ended | tf.equal(size, 0) | (pos >= length)
            pos = tf.where(ended, pos, tf.where(stop, pos + 1, pos + size + 1))
            ended = stop
        pos, budget = tf.cond(
            ended, lambda: (pos, budget - 1), lambda: skip_sub_blocks(pos, budget - 1)
        )
        return pos, budget, height, width, area, frames, state

    zero = tf.constant(0, tf.int64)
    pos, budget, height, width, area, frames, _ = tf.while_loop(
        cond,
        body,
        (13 + table, tf.constant(_MAX_GIF_STEPS), zero, zero, zero, zero, tf.constant(0)),
    )
    return height, width, area, frames, budget > 0


def starts_like_an_image(head):
    """Whether `head` (a file's first bytes, Python bytes) starts like JPEG, PNG, GIF or BMP."""
    return any(head.startswith(magic) for magics in SIGNATURES.values() for magic in magics)


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
    head = _bytes_at(data, length, 0, 30)

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

    jpeg_h, jpeg_w, jpeg_state, jpeg_pos, jpeg_marker, exif = tf.cond(
        is_jpeg,
        lambda: _jpeg_header(data, length),
        lambda: (zero, zero, tf.constant(1), tf.constant(0), tf.constant(0), tf.constant(-1)),
    )
    jpeg_scans = tf.cond(is_jpeg, lambda: _jpeg_scans(data), lambda: tf.constant(0))
    orientation = tf.cond(
        exif >= 0, lambda: _exif_orientation(data, length, exif), lambda: tf.constant(1)
    )
    gif_h, gif_w, gif_area, gif_frames, gif_complete = tf.cond(
        is_gif,
        lambda: _gif_frames(data, length),
        lambda: (zero, zero, zero, zero, tf.constant(True)),
    )
    # BMP: TensorFlow reads signed 32-bit width and height at bytes 18 and 22 whatever the
    # DIB header's kind, and takes the height's absolute value (top-down rows).
    bmp_w = _little_endian(head[18:22])
    bmp_w = tf.where(bmp_w >= 2**31, zero, bmp_w)  # a negative width: refused as zero
    bmp_h = _little_endian(head[22:26])
    bmp_h = tf.where(bmp_h >= 2**31, 2**32 - bmp_h, bmp_h)
    height = tf.gather(tf.stack([zero, jpeg_h, _big_endian(head[20:24]), gif_h, bmp_h]), code)
    width = tf.gather(tf.stack([zero, jpeg_w, _big_endian(head[16:20]), gif_w, bmp_w]), code)
    header_bytes = tf.gather(tf.constant([0, 0, 24, 13, 26]), code)

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
    limit = tf.strings.join(
        [", over the limit of ", tf.strings.as_string(max_pixels), " (export.max_pixels); "]
    )
    checks = [
        (tf.equal(length, 0), tf.constant("empty image bytes")),
        (
            tf.not_equal(unsupported, ""),
            tf.strings.join(["unsupported image format ", unsupported, f"; send {supported}"]),
        ),
        (
            tf.equal(code, UNKNOWN),
            tf.constant(f"not an image: the bytes do not start like {supported}"),
        ),
        (
            tf.logical_and(is_jpeg, tf.equal(jpeg_state, 2)),
            tf.strings.join(
                [
                    "corrupt JPEG: byte ",
                    tf.strings.as_string(jpeg_pos),
                    " is not a marker where the header expects one; send the image re-encoded",
                ]
            ),  # fmt: skip
        ),
        (
            tf.logical_and(is_jpeg, tf.equal(jpeg_state, 4)),
            tf.strings.join(
                [
                    "corrupt JPEG: marker FF ",
                    tf.gather(tf.constant(_HEX), jpeg_marker),
                    " at byte ",
                    tf.strings.as_string(jpeg_pos),
                    " is one the decoder skips or refuses; send the image re-encoded",
                ]
            ),  # fmt: skip
        ),
        (
            tf.logical_and(is_jpeg, tf.not_equal(jpeg_state, 1)),
            tf.constant("corrupt or truncated JPEG: no frame header before the image data"),
        ),
        (length < header_bytes, tf.strings.join(["truncated ", format_name, " header"])),
        (
            tf.logical_and(is_png, tf.logical_not(starts(_PNG_IHDR, 8))),
            tf.constant(
                "corrupt PNG: its first chunk is not a 13-byte IHDR (the decoder would read "
                "its size from a later one); send the image re-encoded"
            ),
        ),
        (
            jpeg_scans > _MAX_JPEG_SCANS,
            tf.strings.join(
                [
                    "JPEG too complex: ",
                    tf.strings.as_string(jpeg_scans),
                    f" scans (FF DA markers), over the limit of {_MAX_JPEG_SCANS}; "
                    "send it re-encoded as baseline or with fewer scans",
                ]
            ),  # fmt: skip
        ),
        (
            tf.logical_and(is_gif, tf.logical_not(gif_complete)),
            tf.constant(
                f"GIF too complex: over {_MAX_GIF_STEPS} steps of the header walk (blocks, "
                "and runs of sub-blocks); send a smaller image or fewer frames"
            ),
        ),
        (
            tf.logical_and(is_gif, tf.equal(gif_frames, 0)),
            tf.constant("corrupt or truncated GIF: no image frame"),
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
                    limit,
                    "send a smaller image",
                ]
            ),  # fmt: skip
        ),
        (
            tf.logical_and(is_gif, gif_area > max_pixels),
            tf.strings.join(
                [
                    "image too large: the GIF's ",
                    tf.strings.as_string(gif_frames),
                    " frames hold ",
                    tf.strings.as_string(gif_area),
                    " pixels in all",
                    limit,
                    "send its first frame alone",
                ]
            ),  # fmt: skip
        ),
    ]
    error = tf.constant("")
    for failed, message in reversed(checks):
        error = tf.where(failed, message, error)
    return tf.equal(error, ""), error, code, orientation


def inspect_images(image_bytes, max_pixels=DEFAULT_MAX_PIXELS):
    """`inspect_image` over a batch.

    Args:
        image_bytes: (B,) string tensor of encoded images.
        max_pixels: int. Largest width x height accepted. Defaults to DEFAULT_MAX_PIXELS.

    Returns:
        (valid (B,) bool, error (B,) string: "" when valid, format (B,) int32,
        orientation (B,) int32).
    """
    max_pixels = tf.constant(int(max_pixels), tf.int64)
    return tf.map_fn(
        lambda data: inspect_image(data, max_pixels),
        image_bytes,
        fn_output_signature=(tf.bool, tf.string, tf.int32, tf.int32),
    )
