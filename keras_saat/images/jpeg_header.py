"""A JPEG's frame size, scan count and EXIF orientation, read as libjpeg reads them.

The segment walk moves as libjpeg's `read_markers` does before the first frame header,
and stops where libjpeg would skip bytes or refuse a marker, because there the two
could read different frames. Core TF ops only; at most MAX_JPEG_SEGMENTS segments.
"""

import collections

import tensorflow as tf

from keras_saat.images.header_bytes import big_endian, bytes_at, little_endian

MAX_JPEG_SEGMENTS = 1024  # segments walked before the frame header; real files have < 20
# Scans (FF DA pairs) in a JPEG: libjpeg walks every block of the frame once a scan, so
# this bounds the decode's time; encoders write 1 (baseline) to about 10 (progressive).
MAX_JPEG_SCANS = 100
_MAX_EXIF_ENTRIES = 32  # IFD0 entries searched for the orientation tag

# Where the segment walk stands (`JpegHeader.state`).
WALKING = 0  # still walking (the walk ran out of segments or bytes here)
FRAME_HEADER = 1  # found the frame header: the size is read
NOT_A_MARKER = 2  # a byte that is not FF where a marker belongs (libjpeg skips it)
START_OF_SCAN = 3  # image data before any frame header
REFUSED_MARKER = 4  # a marker libjpeg discards or refuses here

# JPEG markers as libjpeg's `read_markers` takes them before the first frame header:
# start-of-frame, segments read or skipped by length, and standalone ones. Any other
# marker is one libjpeg discards or refuses, and the walk refuses it too.
_SOF_MARKERS = [m for m in range(0xC0, 0xD0) if m not in (0xC4, 0xC8, 0xCC)]
_SEGMENT_MARKERS = [0xC4, 0xCC, 0xDB, 0xDC, 0xDD, *range(0xE0, 0xF0), 0xFE]
_STANDALONE_MARKERS = [*range(0xD0, 0xD8), 0x01]
_EXIF_ORIENTATION_TAG = 0x0112

JpegHeader = collections.namedtuple(
    "JpegHeader", ["height", "width", "state", "position", "marker", "exif"]
)
JpegHeader.__doc__ = """What the segment walk read before the first frame header (scalars):
height and width (int64, 0 before a frame header), state (int32, WALKING ... REFUSED_MARKER),
position (the byte where the walk stopped), marker (the last one read) and exif (the position
of the first APP1 segment holding "Exif\\0\\0", -1 for none)."""


def jpeg_header(data, length):
    """The segment walk over `data` (a scalar string tensor of `length` bytes): a JpegHeader.

    It stops where libjpeg would skip bytes or refuse a marker: libjpeg discards non-FF
    bytes and `FF 00` pairs, so a walk stepping over them could read a decoy frame header.
    """

    def cond(pos, height, width, state, marker, exif):
        return tf.logical_and(tf.equal(state, WALKING), pos + 4 <= length)

    def body(pos, height, width, state, marker, exif):
        head = bytes_at(data, length, pos, 10)
        marker = head[1]
        is_sof = tf.reduce_any(tf.equal(marker, _SOF_MARKERS))
        standalone = tf.reduce_any(tf.equal(marker, _STANDALONE_MARKERS))
        segment = tf.cast(big_endian(head[2:4]), tf.int32)
        skipped = tf.logical_and(tf.reduce_any(tf.equal(marker, _SEGMENT_MARKERS)), segment >= 2)
        # From the lowest priority up: a non-FF byte overrides every other reading.
        state = tf.where(skipped | standalone | tf.equal(marker, 0xFF), WALKING, REFUSED_MARKER)
        state = tf.where(tf.equal(marker, 0xDA), START_OF_SCAN, state)
        state = tf.where(is_sof, FRAME_HEADER, state)
        state = tf.where(tf.not_equal(head[0], 0xFF), NOT_A_MARKER, state)
        height = tf.where(is_sof, big_endian(head[5:7]), height)
        width = tf.where(is_sof, big_endian(head[7:9]), width)
        exif_tag = tf.reduce_all(tf.equal(head[4:10], tf.constant(list(b"Exif\x00\x00"))))
        is_exif = tf.logical_and(tf.equal(marker, 0xE1), exif_tag)
        exif = tf.where(tf.logical_and(is_exif, exif < 0), pos, exif)
        step = tf.where(tf.equal(marker, 0xFF), 1, tf.where(standalone, 2, 2 + segment))
        # A stop keeps its position for the error.
        step = tf.where(tf.equal(state, WALKING), step, 0)
        return pos + step, height, width, state, marker, exif

    zero = tf.constant(0, tf.int64)
    pos, height, width, state, marker, exif = tf.while_loop(
        cond,
        body,
        (tf.constant(2), zero, zero, tf.constant(WALKING), tf.constant(0), tf.constant(-1)),
        maximum_iterations=MAX_JPEG_SEGMENTS,
    )
    return JpegHeader(height, width, state, pos, marker, exif)


def not_a_jpeg():
    """The JpegHeader of bytes that are not a JPEG (the other branch of a `tf.cond`)."""
    zero = tf.constant(0, tf.int64)
    return JpegHeader(
        zero, zero, tf.constant(FRAME_HEADER), tf.constant(0), tf.constant(0), tf.constant(-1)
    )


_SCAN_WINDOW = 1 << 20  # bytes of the data read a step when counting scans


def jpeg_scans(data):
    """How many `FF DA` pairs `data` holds: at least its scan count (an FF inside
    entropy-coded data is followed by 00 or a restart marker)."""
    # A window at a time (overlapping by one byte), so no array of the whole data is held.
    length = tf.strings.length(data)

    def count(start, total):
        raw = tf.io.decode_raw(tf.strings.substr(data, start, _SCAN_WINDOW + 1), tf.uint8)
        pairs = tf.logical_and(tf.equal(raw[:-1], 0xFF), tf.equal(raw[1:], 0xDA))
        return start + _SCAN_WINDOW, total + tf.reduce_sum(tf.cast(pairs, tf.int32))

    _, total = tf.while_loop(
        lambda start, total: start < length, count, (tf.constant(0), tf.constant(0))
    )
    return total


def exif_orientation(data, length, exif):
    """The orientation tag (1-8) of the EXIF segment at `exif`; 1 when absent or unreadable."""
    tiff = exif + 10  # marker (2), length (2), "Exif\0\0" (6)
    order = bytes_at(data, length, tiff, 2)
    little = tf.reduce_all(tf.equal(order, tf.constant(list(b"II"))))

    def number(values):
        return tf.where(little, little_endian(values), big_endian(values))

    ifd = tf.cast(tf.minimum(number(bytes_at(data, length, tiff + 4, 4)), 2**30), tf.int32)
    count = number(bytes_at(data, length, tiff + ifd, 2))
    entries = tf.reshape(
        bytes_at(data, length, tiff + ifd + 2, 12 * _MAX_EXIF_ENTRIES), [_MAX_EXIF_ENTRIES, 12]
    )
    tags = tf.where(
        little, entries[:, 0] + 256 * entries[:, 1], 256 * entries[:, 0] + entries[:, 1]
    )
    values = tf.where(
        little, entries[:, 8] + 256 * entries[:, 9], 256 * entries[:, 8] + entries[:, 9]
    )  # a SHORT, left-justified in the entry's 4-byte value field
    listed = tf.range(_MAX_EXIF_ENTRIES, dtype=tf.int64) < count
    # The IFD's offset and count are declared: an entry counts only inside the segment.
    segment_end = tf.cast(exif, tf.int64) + 2 + big_endian(bytes_at(data, length, exif + 2, 2))
    entry_end = (
        tf.cast(tiff, tf.int64) + tf.cast(ifd, tf.int64) + 2
        + 12 * tf.range(1, _MAX_EXIF_ENTRIES + 1, dtype=tf.int64)
    )  # fmt: skip
    inside = tf.logical_and(entry_end <= segment_end, ifd >= 8)  # past the TIFF header
    match = tf.logical_and(tf.equal(tags, _EXIF_ORIENTATION_TAG), listed & inside)
    value = tf.reduce_max(tf.where(match, values, 0))
    readable = tf.logical_and(exif >= 0, tf.reduce_any(match))
    return tf.where(tf.logical_and(readable, (value >= 1) & (value <= 8)), value, 1)
