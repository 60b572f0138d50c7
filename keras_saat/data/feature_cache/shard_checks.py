"""Damaged feature cache shards: found by name, with what to do, never a DataLossError.

A TFRecord file is a run of records, each `length (8 bytes) | crc of length (4) |
data (length) | crc of data (4)`. `check_shard` compares a shard's size with the one
its index recorded when it was written (one stat a shard, so opening a cache is
O(shards) file-system calls however many images it holds), and where they differ, or
no size was recorded, `check_framing` walks the lengths alone (a seek per record, no
data read) to say where it is cut: a truncated, cut or padded shard is named when the
cache is opened. A flipped bit inside a record's data shows only when it is read, and
`naming_damaged_shards` turns that DataLossError into the shard's name.
"""

import contextlib
import os
import re
import struct

import tensorflow as tf

from keras_saat.data.feature_cache.cache_index import INDEX
from keras_saat.errors import KerasSaatError
from keras_saat.workdir import cache_owner

_HEADER = 12  # length (uint64) and its crc (uint32)
_FOOTER = 4  # the data's crc (uint32)


def damaged_shard_error(path, reason):
    """The one-line error for a damaged shard: its file, why, and what to do (in the
    workdir that owns the cache, which a run reading another's cache is not)."""
    return KerasSaatError(
        f"the feature cache shard {path} is damaged ({reason}); delete that file and run "
        f"`keras-saat extract-features` again{_for_owner(os.path.dirname(path))}, which "
        "writes the missing shards anew"
    )


def _for_owner(cache):
    """ " for the workdir that owns the cache, W" where the cache folder `cache` is a
    workdir's (`cache_owner`), else ""."""
    owner = cache_owner(cache)
    return "" if owner is None else f" for the workdir that owns the cache, {owner}"


def read_error_reason(err):
    """The reason in a TFRecord reader's DataLossError, without the op's decorations."""
    message = err.message.splitlines()[0] if err.message else type(err).__name__
    match = re.search(r"corrupted record at (\d+)", message)
    if match:
        return f"a record's checksum does not match, at byte {match[1]}"
    return re.sub(r"\{\{.*?\}\}|\s*\[Op:.*$", "", message).strip()[:200]


def check_framing(path):
    """Raises `damaged_shard_error` when `path` is missing or its records do not end
    exactly at the end of the file (a truncated, cut or padded shard)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as file:
            offset, count = 0, 0
            while offset < size:
                if offset + _HEADER > size:
                    raise damaged_shard_error(path, f"cut inside record {count + 1}'s header")
                file.seek(offset)
                (length,) = struct.unpack("<Q", file.read(8))
                offset += _HEADER + length + _FOOTER
                count += 1
                if offset > size:
                    raise damaged_shard_error(
                        path, f"record {count} runs {offset - size} bytes past the file's end"
                    )
    except FileNotFoundError:
        raise damaged_shard_error(path, "the file is missing") from None


def check_shard(path, size=None):
    """Raises `damaged_shard_error` when `path` is missing, or is not `size` bytes (the
    size written, from the cache's index) or, with no size recorded, its records do not
    end exactly at its end (`check_framing`).

    Args:
        path: str or Path. The shard.
        size: int or None. Its bytes as written. Defaults to None (walk its framing).
    """
    if size is None:
        check_framing(path)
        return
    try:
        found = os.path.getsize(path)
    except FileNotFoundError:
        raise damaged_shard_error(path, "the file is missing") from None
    if found != size:
        check_framing(path)  # where a record is cut, when one is
        raise damaged_shard_error(path, f"{found} bytes, where {size} were written")


def first_damaged(paths):
    """The first of `paths` whose records cannot all be read, and TensorFlow's reason;
    (None, None) when all read. Reads every record: for after a failure, not before."""
    for path in paths:
        try:
            for _ in tf.data.TFRecordDataset(path).batch(1024):
                pass
        except (tf.errors.DataLossError, tf.errors.NotFoundError) as err:
            return path, read_error_reason(err)
    return None, None


@contextlib.contextmanager
def naming_damaged_shards(paths):
    """Turns a DataLossError raised inside the block into a `damaged_shard_error` naming
    the first of `paths` (a split's shards) that fails to read, and a shard that holds
    other images than the cache's index says (`planned_batches`) into that one line.

    Args:
        paths: list of str. The shard files the block reads.
    """
    try:
        yield
    except tf.errors.DataLossError as err:
        path, reason = first_damaged(paths)
        if path is None:
            owner = _for_owner(os.path.dirname(paths[0])) if paths else ""
            raise KerasSaatError(
                f"a feature cache shard could not be read ({read_error_reason(err)}); "
                f"delete the cache folder and run `keras-saat extract-features` again{owner}"
            ) from None
        raise damaged_shard_error(path, reason) from None
    except tf.errors.InvalidArgumentError as err:
        says = rf"in [^\]]*{re.escape(INDEX)} says"
        found = re.search(rf"\[(the feature cache (?:{says}|holds a record)[^\]]*)\]", err.message)
        if found is None:
            raise
        raise KerasSaatError(found.group(1)) from None
