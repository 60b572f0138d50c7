"""Damaged feature cache shards, named with what to do instead of a DataLossError:
`check_shard` compares a shard's size with its index's, and where they differ
`check_framing` walks the TFRecord lengths to say where it is cut; a flipped bit inside a
record shows only when read, and `naming_damaged_shards` then names its shard."""

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
    """The one-line error for a damaged shard: its file, why, and what to do."""
    return KerasSaatError(
        f"the feature cache shard {path} is damaged ({reason}); delete that file and run "
        f"`keras-saat extract-features` again{_for_owner(os.path.dirname(path))}, which "
        "writes the missing shards anew"
    )


def _for_owner(cache):
    """ " for the workdir that owns the cache, W" where `cache` is a workdir's, else ""."""
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
    """Raises `damaged_shard_error` when `path` is missing or its records do not end exactly
    at the end of the file."""
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
    """Raises `damaged_shard_error` when `path` is missing or not `size` bytes, or, with no
    size recorded, its framing is not whole (`check_framing`)."""
    if size is not None and os.path.isfile(path) and os.path.getsize(path) == size:
        return
    check_framing(path)  # names a missing file, or where a record is cut
    if size is not None:
        found = os.path.getsize(path)
        raise damaged_shard_error(path, f"{found} bytes, where {size} were written")


@contextlib.contextmanager
def naming_damaged_shards(paths):
    """Turns a DataLossError inside the block into a `damaged_shard_error` naming the first
    of `paths` that fails to read, and a shard holding other images than the index says
    into that one line.
    """
    try:
        yield
    except tf.errors.DataLossError as err:
        for path in paths:  # every record read, so only after a failure
            try:
                for _ in tf.data.TFRecordDataset(path).batch(1024):
                    pass
            except (tf.errors.DataLossError, tf.errors.NotFoundError) as found:
                raise damaged_shard_error(path, read_error_reason(found)) from None
        owner = _for_owner(os.path.dirname(paths[0])) if paths else ""
        raise KerasSaatError(
            f"a feature cache shard could not be read ({read_error_reason(err)}); "
            f"delete the cache folder and run `keras-saat extract-features` again{owner}"
        ) from None
    except tf.errors.InvalidArgumentError as err:
        says = rf"in [^\]]*{re.escape(INDEX)} says"
        found = re.search(rf"\[(the feature cache (?:{says}|holds a record)[^\]]*)\]", err.message)
        if found is None:
            raise
        raise KerasSaatError(found.group(1)) from None
