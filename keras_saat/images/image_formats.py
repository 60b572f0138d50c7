"""The image formats decoded, their magic bytes and the decode size limit, without
TensorFlow, so the command line checks with them before it loads."""

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
