"""A GIF's decode size, read from every frame's image descriptor.

TensorFlow decodes a GIF onto a canvas as large as its largest frame after reading
every frame, so the walk visits every block after the global colour table. Core TF ops
only; at most MAX_GIF_STEPS steps.
"""

import collections

import tensorflow as tf

from keras_saat.images.header_bytes import byte_values, little_endian

# Steps of the GIF walk: one a block, and one a run of sub-blocks (up to _GIF_STRIDES
# full ones, then _GIF_WINDOW bytes of any). The cap bounds the walk whatever the bytes;
# real files need up to 3 steps a frame.
MAX_GIF_STEPS = 1 << 12
_GIF_STRIDES = 1024
_GIF_HOPS = 3  # sub-blocks crossed one by one before a run counts as a step
_GIF_WINDOW = 1024  # a power of 2

# Where the block walk stands.
WALKING = 0
TRAILER = 1  # the trailer (3B): the walk is done
UNKNOWN_BLOCK = 2  # a block that is no extension, image or trailer (the decoder refuses it)

# The first byte of each block.
_EXTENSION, _IMAGE, _TRAILER = 0x21, 0x2C, 0x3B

GifFrames = collections.namedtuple("GifFrames", ["height", "width", "area", "frames", "complete"])
GifFrames.__doc__ = """What the block walk read over every frame (scalars): height and width
of the canvas the decoder allocates (the largest frame), the frames' total area, how many
frames (image descriptors), and complete (False when the walk hit MAX_GIF_STEPS first)."""


def gif_frames(data, length):
    """The block walk over `data` (a scalar string tensor of `length` bytes): a GifFrames.

    Only the bytes a step looks at are read, and sub-blocks are crossed _GIF_WINDOW bytes
    a step by pointer doubling, so the steps are the blocks plus bytes / _GIF_WINDOW.
    """

    def at(positions):
        """The bytes at `positions` as int32, zeros past the end."""
        return byte_values(data, length, positions)

    flags = at(tf.constant(10))
    table = tf.where(flags >= 128, 3 * tf.bitwise.left_shift(2, flags % 8), 0)
    offsets = tf.range(10)
    window = tf.range(_GIF_WINDOW)
    beyond = tf.range(_GIF_WINDOW, _GIF_WINDOW + 256)  # where a hop leaves the window
    strides = 256 * tf.range(_GIF_STRIDES)

    def skip_sub_blocks(pos, budget):
        """Past the sub-blocks at `pos` (0 or the data's end ends them), a step at a time."""

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
        return (tf.equal(state, WALKING)) & (pos < length) & (budget > 0)

    def body(pos, budget, height, width, area, frames, state):
        head = at(pos + offsets)
        kind = head[0]  # an extension, an image or the trailer
        is_image = tf.equal(kind, _IMAGE)
        frame_w = little_endian(head[5:7])
        frame_h = little_endian(head[7:9])
        local = tf.where(head[9] >= 128, 3 * tf.bitwise.left_shift(2, head[9] % 8), 0)
        known = tf.logical_or(is_image, tf.equal(kind, _EXTENSION))
        height = tf.where(is_image, tf.maximum(height, frame_h), height)
        width = tf.where(is_image, tf.maximum(width, frame_w), width)
        area = tf.where(is_image, area + frame_h * frame_w, area)
        frames = tf.where(is_image, frames + 1, frames)
        state = tf.where(tf.equal(kind, _TRAILER), TRAILER, tf.where(known, WALKING, UNKNOWN_BLOCK))
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
        (13 + table, tf.constant(MAX_GIF_STEPS), zero, zero, zero, zero, tf.constant(WALKING)),
    )
    return GifFrames(height, width, area, frames, budget > 0)


def not_a_gif():
    """The GifFrames of bytes that are not a GIF (the other branch of a `tf.cond`)."""
    zero = tf.constant(0, tf.int64)
    return GifFrames(zero, zero, zero, zero, tf.constant(True))
