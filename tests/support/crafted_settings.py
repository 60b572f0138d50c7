"""Crafted command-line inputs: special files named like images, hostile configs, damaged
feature cache shards. The builders make each input small (a link, a FIFO, a sparse file,
a few hundred bytes of YAML) under a scratch folder; the tests and the bench's hostile
part (`CASES`) hand them to the code `keras-saat` runs.
"""

import os
from pathlib import Path

from tests.support.hostile_cases import HostileCase, error_line

SPARSE_BYTES = 8 * 1024**3  # a sparse file of this length costs no disk
SHUFFLE_BUFFER_2_31 = 2**31


def special_image_files(scratch):
    """A folder of image-named special files and one real image file.

    Returns:
        dict: name -> Path, for "dev_zero" (a link to /dev/zero), "fifo", "sparse"
        (8 GiB, no blocks), "folder" (an empty folder named y.png) and "image" (a
        1x1 PNG beside them).
    """
    import io

    from PIL import Image

    folder = Path(scratch) / "special"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "dev_zero": folder / "z.png",
        "fifo": folder / "x.png",
        "sparse": folder / "big.png",
        "folder": folder / "y.png",
        "image": folder / "ok.png",
    }
    paths["dev_zero"].symlink_to("/dev/zero")
    os.mkfifo(paths["fifo"])
    with open(paths["sparse"], "wb") as file:
        file.truncate(SPARSE_BYTES)
    paths["folder"].mkdir()
    out = io.BytesIO()
    Image.new("RGB", (1, 1)).save(out, "PNG")
    paths["image"].write_bytes(out.getvalue())
    return paths


def billion_laughs(levels=9):
    """A YAML config whose `name` is a list expanding to 10**levels strings through
    aliases (each level ten aliases of the one before)."""
    lines = ["name:", '  - &a0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


def deep_nesting(depth=20000):
    """A YAML config nested `depth` flow sequences deep."""
    return "name: " + "[" * depth + "]" * depth + "\n"


ZLIB_BOMB_BYTES = 1 << 30  # what the crafted record inflates to: 1 MiB of zlib


def zlib_bomb(inflated=ZLIB_BOMB_BYTES, chunk=1 << 20):
    """zlib data that inflates to `inflated` zero bytes, about a thousandth of that."""
    import zlib

    packer, zeros = zlib.compressobj(9), bytes(chunk)
    parts = [packer.compress(zeros) for _ in range(inflated // chunk)]
    return b"".join(parts) + packer.flush()


def write_damaged_cache(folder, damage, locations=4, channels=8):
    """A small synthetic feature cache (3 train shards of 8 images of (locations,
    channels) features) with its second shard damaged: "truncate" cuts its last 10
    bytes, "flip" flips a bit inside its first record's data; "zlib_bomb" (a zlib cache)
    rewrites it with a first record whose features inflate to ZLIB_BOMB_BYTES, whole
    records with valid checksums. Returns the damaged shard's path."""
    from tests.support.synthetic_data import write_synthetic_cache

    size = {"locations": locations, "channels": channels}
    compression = "zlib" if damage == "zlib_bomb" else "none"
    write_synthetic_cache(folder, 24, size, shard_size=8, compression=compression)
    shard = Path(folder) / "train-00001-of-00003.tfrecord"
    if damage == "zlib_bomb":
        import tensorflow as tf

        from keras_saat.data.feature_cache.cache_format import RECORD_SPEC

        records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
        example = tf.train.Example.FromString(records[0])
        example.features.feature["features"].bytes_list.value[0] = zlib_bomb()
        records[0] = example.SerializeToString()
        assert set(example.features.feature) == set(RECORD_SPEC)
        with tf.io.TFRecordWriter(str(shard)) as writer:
            for record in records:
                writer.write(record)
        return shard
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        data = data[:-10]
    else:
        data[12 + 20] ^= 0x10  # past the first record's length and its crc
    shard.write_bytes(bytes(data))
    return shard


def read_cache_split(folder, split="train"):
    """Streams a cache split as training and evaluation do (`FeatureCache.dataset`), its
    damaged shards named."""
    from keras_saat.data.feature_cache.feature_cache import FeatureCache
    from keras_saat.data.feature_cache.shard_checks import naming_damaged_shards

    cache = FeatureCache(folder)
    with naming_damaged_shards(cache.shard_files((split,))):
        return sum(1 for _ in cache.dataset(split))


def _file_row(key):
    def run(scratch):
        from keras_saat.images.image_files import encoded_images, find_images

        paths = special_image_files(scratch)
        rows = {
            name: (data, error)
            for name, data, error in encoded_images(find_images([paths[key], paths["image"]]))
        }
        if not rows[str(paths["image"])][0]:
            return "the valid image beside it got no bytes"
        return rows[str(paths[key])][1]

    return run


def _config_file(text):
    def run(scratch):
        from keras_saat.config import load_config

        path = Path(scratch) / "crafted.yaml"
        path.write_text(text)
        return error_line(lambda: load_config(path))

    return run


def _sparse_config(scratch):
    from keras_saat.config import load_config

    path = Path(scratch) / "crafted.yaml"
    with open(path, "wb") as file:
        file.truncate(SPARSE_BYTES)
    return error_line(lambda: load_config(path))


def _override(text):
    def run(scratch):
        from keras_saat.config import load_config

        return error_line(lambda: load_config(None, [text]))

    return run


def _damaged_cache(damage):
    def run(scratch):
        return error_line(
            lambda: read_cache_split(write_damaged_cache(Path(scratch) / "c", damage).parent)
        )

    return run


_AREA = "command line"
CASES = [
    HostileCase("caption_link_to_dev_zero", _AREA, "never opened: a device", _file_row("dev_zero")),
    HostileCase("caption_fifo", _AREA, "never opened: a FIFO", _file_row("fifo")),
    HostileCase("caption_sparse_8gb", _AREA, "64 MiB read from a file", _file_row("sparse")),
    HostileCase("caption_folder_named_png", _AREA, "an error row", _file_row("folder")),
    HostileCase("config_billion_laughs", _AREA, "no YAML aliases", _config_file(billion_laughs())),
    HostileCase("config_deep_nesting", _AREA, "32 levels of YAML", _config_file(deep_nesting())),
    HostileCase("config_sparse_8gb", _AREA, "1 MiB of config read", _sparse_config),
    HostileCase(
        "config_shuffle_buffer_2_31",
        _AREA,
        "each number in its range",
        _override(f"data.shuffle_buffer={SHUFFLE_BUFFER_2_31}"),
    ),
    HostileCase(
        "export_max_pixels_negative", _AREA, "1..1e9 pixels", _override("export.max_pixels=-1")
    ),
    HostileCase(
        "cache_shard_truncated", _AREA, "framing checked at open", _damaged_cache("truncate")
    ),
    HostileCase("cache_shard_bit_flip", _AREA, "the shard named", _damaged_cache("flip")),
    HostileCase(
        "cache_zlib_record_1gb",
        _AREA,
        "length checked before inflating",
        _damaged_cache("zlib_bomb"),
    ),
]
