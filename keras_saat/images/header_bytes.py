"""Reading header fields out of a scalar string tensor with core TF ops, never an op error."""

import tensorflow as tf

_PAD = 32  # bytes of zero padding, so header reads past the end see zeros instead of failing


def bytes_at(data, length, pos, count):
    """`count` bytes of `data` from `pos` as int32, zeros past the end (never an op error)."""
    pos = tf.clip_by_value(tf.cast(pos, tf.int32), 0, length)
    chunk = tf.strings.substr(data, pos, count)
    padded = tf.strings.join([chunk, tf.constant(b"\x00" * _PAD)])
    raw = tf.io.decode_raw(tf.strings.substr(padded, 0, count), tf.uint8)
    return tf.cast(tf.reshape(raw, [count]), tf.int32)


def byte_values(data, length, positions):
    """The bytes of `data` at `positions` (int32, any shape) as int32, zeros past the end;
    only those bytes are read, never a copy of the data."""
    safe = tf.clip_by_value(positions, 0, tf.maximum(length - 1, 0))
    chars = tf.strings.substr(data, safe, tf.ones_like(safe))
    values = tf.io.decode_raw(chars, tf.uint8, fixed_length=1)[..., 0]
    return tf.where(positions < length, tf.cast(values, tf.int32), 0)


def big_endian(values):
    """A static-length vector of byte values, most significant first, as int64."""
    out = tf.constant(0, tf.int64)
    for i in range(values.shape[0]):
        out = out * 256 + tf.cast(values[i], tf.int64)
    return out


def little_endian(values):
    """A static-length vector of byte values, least significant first, as int64."""
    return big_endian(tf.reverse(values, [0]))
