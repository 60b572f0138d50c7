"""The image formats decoded, their magic bytes and the decode size limit; no TensorFlow.

The command line checks paths and settings with these before TensorFlow loads; the
header checks (`keras_saat.images.header_checks`) use the same codes inside the graph.
"""

FORMATS = ("JPEG", "PNG", "GIF", "BMP")
DEFAULT_MAX_PIXELS = 25_000_000  # 5000 x 5000: 75 MB of uint8 pixels at most per image

# Format codes inside the graph.
UNKNOWN, JPEG, PNG, GIF, BMP = 0, 1, 2, 3, 4
# The magic bytes each decoded format starts with.
SIGNATURES = {
    JPEG: (b"\xff\xd8\xff",),
    PNG: (b"\x89PNG\r\n\x1a\n",),
    GIF: (b"GIF87a", b"GIF89a"),
    BMP: (b"BM",),
}


def starts_like_an_image(head):
    """Whether `head` (a file's first bytes, Python bytes) starts like JPEG, PNG, GIF or BMP."""
    return any(head.startswith(magic) for magics in SIGNATURES.values() for magic in magics)
