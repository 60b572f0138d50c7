"""Crafted files around a run: a feature cache's bookkeeping, captions tables, the
workdir's lock, image paths handed to the serving clients, and a long JPEG for the
header walk. The builders make each input small (a link, a FIFO, a few lines of text,
an edited index.json; the 36 MB caption line is written a MiB at a time) under a
scratch folder; the tests and the bench's hostile part (`CASES`) hand them to the code
a user reaches.
"""

import json
import os
from pathlib import Path

from tests.support.hostile_cases import HostileCase, error_line

ESCAPING_SHARD = "../../victim.tfrecord"  # relative to the cache folder
VICTIM_TEXT = "the victim's own bytes\n"
LONG_LINE_BYTES = 36 << 20  # one caption line of a captions table
JPEG_SCAN_PAIRS = 35 << 20  # `FF DA 00` triples of the 100 MB JPEG: about 105 MB


def _victim(path):
    path.write_text(VICTIM_TEXT)
    return path


def _unchanged(victim, answer):
    """`answer`, or a line saying the victim outside the scratch input was written."""
    if victim.read_text() != VICTIM_TEXT:
        return f"the file outside was written ({victim.stat().st_size} bytes): {answer}"
    return answer


def _last_line(answer):
    """A reader's error lists its bad rows a line each after its first line: the last one."""
    return answer.strip().splitlines()[-1].strip() if answer else ""


def escaping_cache(scratch):
    """A small synthetic cache in a workdir's features folder under `scratch` whose
    index.json names its shard ESCAPING_SHARD; returns (the cache folder, the victim file
    that name reaches)."""
    from keras_saat.data.feature_cache.cache_index import INDEX
    from keras_saat.workdir import FEATURES_DIR
    from tests.support.synthetic_data import write_synthetic_cache

    folder = Path(scratch) / "w" / FEATURES_DIR
    write_synthetic_cache(folder, 8, {"locations": 4, "channels": 8}, shard_size=8)
    index = json.loads((folder / INDEX).read_text())
    index["splits"]["train"]["shards"][0]["file"] = ESCAPING_SHARD
    (folder / INDEX).write_text(json.dumps(index))
    return folder, _victim(folder / ESCAPING_SHARD)


def _cache_index_escape(scratch):
    from keras_saat.data.feature_cache.feature_cache import FeatureCache

    folder, victim = escaping_cache(scratch)
    return _unchanged(victim, error_line(lambda: FeatureCache(folder)))


def _images(folder, names):
    for name in names:
        (folder / name).touch()  # only stat'ed by the reader


def _read_table(path):
    from keras_saat.data.readers.caption_table import read_caption_table

    found = []
    answer = error_line(lambda: found.append(read_caption_table(path)))
    return f"{len(found[0].records)} images" if found else _last_line(answer)


def leading_quote_tsv(scratch):
    """A TSV of 6 images whose first caption starts with `"` (CSV quoting would read the
    rows after it as that caption)."""
    folder = Path(scratch)
    names = [f"img{i}.png" for i in range(6)]
    _images(folder, names)
    rows = ['"Quoted" at the start of a caption'] + [f"a caption of image {i}" for i in range(1, 6)]
    lines = ["image\tcaption"] + [f"{n}\t{c}" for n, c in zip(names, rows, strict=True)]
    path = folder / "captions.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def long_line_tsv(scratch, size=LONG_LINE_BYTES):
    """A TSV whose second row is one caption line of `size` bytes, written a MiB at a
    time, between two good rows."""
    folder = Path(scratch)
    _images(folder, ["a.png", "b.png", "c.png"])
    path = folder / "captions.tsv"
    chunk = b"a long caption " * ((1 << 20) // 15)
    with open(path, "wb") as file:
        file.write(b"image\tcaption\na.png\ta dog on the grass\nb.png\t")
        for _ in range(size // len(chunk)):
            file.write(chunk)
        file.write(b"\nc.png\ta cat on a mat\n")
    return path


def line_separator_jsonl(scratch):
    """JSON lines as `json.dumps(ensure_ascii=False)` writes them, U+2028 and U+0085
    inside the first caption."""
    folder = Path(scratch)
    _images(folder, ["a.png", "b.png", "c.png"])
    captions = ["a dog\u2028on the grass\u0085at noon", "a cat on a mat", "two birds"]
    rows = [
        json.dumps({"image": name, "caption": caption}, ensure_ascii=False)
        for name, caption in zip(["a.png", "b.png", "c.png"], captions, strict=True)
    ]
    path = folder / "captions.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path, captions[0]


def _jsonl_line_separator(scratch):
    from keras_saat.data.readers.caption_table import read_caption_table

    path, caption = line_separator_jsonl(scratch)
    found = []
    answer = error_line(lambda: found.append(read_caption_table(path)))
    if not found:
        return _last_line(answer)
    kept = any(caption in record.captions for record in found[0].records)
    return f"{len(found[0].records)} images, " + (
        "U+2028 and U+0085 kept inside one caption" if kept else "the caption was cut"
    )


def _workdir_lock_symlink(scratch):
    from keras_saat.workdir import LOCK_FILE, workdir_lock

    workdir = Path(scratch) / "w"
    workdir.mkdir()
    victim = _victim(Path(scratch) / "victim.txt")
    (workdir / LOCK_FILE).symlink_to(victim)

    def hold():
        with workdir_lock(workdir, "train"):
            pass

    return _unchanged(victim, error_line(hold))


def jpeg_scans_large(pairs=JPEG_SCAN_PAIRS):
    """About 105 MB of `FF DA 00` after an SOI: every scan count window is full of pairs."""
    return b"\xff\xd8" + b"\xff\xda\x00" * pairs + b"\xff\xd9"


def _jpeg_scans_100mb(scratch):
    from tests.support.crafted_images import decode_one

    return decode_one(jpeg_scans_large())


def _client_fifo(scratch):
    from keras_saat.serving.captions import read_images

    fifo = Path(scratch) / "x.png"
    os.mkfifo(fifo)  # no writer: an open that blocks would hang here
    return error_line(lambda: read_images([fifo]))


_AREA = "command line"
CASES = [
    HostileCase("cache_index_escape", _AREA, "shard names as the layout's", _cache_index_escape),
    HostileCase(
        "tsv_leading_quote",
        _AREA,
        "TSV never CSV-quoted",
        lambda scratch: _read_table(leading_quote_tsv(scratch)),
    ),
    HostileCase(
        "caption_line_36mb",
        _AREA,
        "64 KiB a line, the rest skipped",
        lambda scratch: _read_table(long_line_tsv(scratch)),
    ),
    HostileCase("jsonl_line_separator", _AREA, 'split at "\\n" only', _jsonl_line_separator),
    HostileCase("workdir_lock_symlink", _AREA, "lock never through a link", _workdir_lock_symlink),
    HostileCase(
        "jpeg_scans_100mb", "export graph", "scans counted a MiB at a time", _jpeg_scans_100mb
    ),
    HostileCase("client_fifo", "untrusted files", "never opened: a FIFO", _client_fifo),
]
