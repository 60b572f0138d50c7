"""The feature cache's bookkeeping: index.json, progress.jsonl and the skips of a shard.

`write_index` is the one writer of index.json and `new_index`, `set_split` and
`shard_file` its one shape, so every extractor (one-process, Beam, the benchmarks'
synthetic caches) makes the layout `FeatureCache` reads.
"""

import contextlib
import json
import os
from pathlib import Path

from keras_saat.data.feature_cache.cache_format import (
    COMPRESSIONS,
    DTYPES,
    extraction_fingerprint,
    extraction_header,
    format_name,
    shard_content,
    shard_inputs,
)
from keras_saat.data.readers.caption_dataset import SPLITS
from keras_saat.errors import FileWriteError, KerasSaatError
from keras_saat.images.image_files import MAX_FILE_BYTES
from keras_saat.io_utils import remove_temporaries, write_json_atomic

INDEX = "index.json"
PROGRESS = "progress.jsonl"
MISSING, UNDECODABLE = "missing image file", "undecodable image"  # the index's skip reasons
VERSION = 2  # 2: each shard records its inputs (`shard_inputs`)


def new_index(header, fingerprint=None):
    """A cache's index with no splits: the layout's version, `header` and `fingerprint`."""
    return {"version": VERSION, **header, "fingerprint": fingerprint, "splits": {}}


def shard_file(split, number, shards):
    """The file name of shard `number` of a split's `shards`."""
    return f"{split}-{number:05d}-of-{shards:05d}.tfrecord"


def set_split(index, split, count, shard_size, shards):
    """Puts a split of `count` images, in shards of `shard_size`, into `index`."""
    index["splits"][split] = {"count": count, "shard_size": shard_size, "shards": shards}


def shard_entry(index, split, number):
    """The index entry of shard `number` of `split` (a writer updates it in place)."""
    return index["splits"][split]["shards"][number]


def write_index(directory, index, needed=True):
    """Writes a cache's index.json atomically; returns whether it did. A write not `needed`
    (one that only tidies) fails quietly, so a read-only cache is read as it is."""
    try:
        write_json_atomic(Path(directory) / INDEX, index)
    except FileWriteError:
        if needed:
            raise
        return False
    return True


def _damaged(directory, what):
    return KerasSaatError(
        f"the feature cache's {Path(directory) / INDEX} {what}; delete the folder {directory} "
        "(it is extracted again) or choose another workdir"
    )


def whole_entry(shard, shard_size, count):
    """Whether a shard's entry has the layout's fields, each within the shard and split."""
    written, skipped = shard.get("written"), shard.get("skipped")
    if not (isinstance(shard.get("done"), bool) and isinstance(written, int)):
        return False
    if not isinstance(skipped, list) or not 0 <= written <= shard_size - len(skipped):
        return False
    return all(
        isinstance(s, list)
        and len(s) == 2
        and isinstance(s[0], int)
        and 0 <= s[0] < count
        and isinstance(s[1], str)
        for s in skipped
    )


def check_layout(directory, index):
    """Raises KerasSaatError unless `index` has the layout's shape; a shared or downloaded
    cache carries its own index, so no name in it is trusted to stay inside the folder."""
    splits = index.get("splits") if isinstance(index, dict) else None
    if not isinstance(splits, dict):
        raise _damaged(directory, "is not a cache index (no splits)")
    grid, channels = index.get("grid"), index.get("channels")
    if not (
        isinstance(grid, list)
        and len(grid) == 2
        and all(isinstance(g, int) and g > 0 for g in (*grid, channels))
    ):
        raise _damaged(directory, "has no feature grid and channels (positive integers)")
    if index.get("dtype") not in DTYPES or index.get("compression", "none") not in COMPRESSIONS:
        raise _damaged(directory, "names no record format this keras-saat reads")
    for split, entry in splits.items():
        if split not in SPLITS:
            raise _damaged(
                directory, f"names a split {split[:40]!r}, not one of {', '.join(SPLITS)}"
            )
        shards = entry.get("shards") if isinstance(entry, dict) else None
        if not isinstance(shards, list) or not all(isinstance(s, dict) for s in shards):
            raise _damaged(directory, f"has no shard list for {split}")
        if not all(
            isinstance(entry.get(k), int) and entry[k] >= 0 for k in ("count", "shard_size")
        ):
            raise _damaged(directory, f"has no image count or shard size for {split}")
        for number, shard in enumerate(shards):
            if not whole_entry(shard, entry["shard_size"], entry["count"]):
                raise _damaged(directory, f"has a malformed entry for {split}'s shard {number}")
            if shard.get("file") != (expected := shard_file(split, number, len(shards))):
                found = f"{str(shard.get('file'))[:80]!r} for {split}'s shard {number}"
                raise _damaged(directory, f"names {found}, not {expected!r}")
    return index


def read_index(directory):
    """index.json of a cache folder, its layout checked (else a KerasSaatError), with the
    finished shards of progress.jsonl applied (a torn line is ignored: the shard is redone).
    """
    directory = Path(directory)
    try:
        index = json.loads((directory / INDEX).read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        raise _damaged(directory, "is damaged (not JSON)") from None
    check_layout(directory, index)
    progress = directory / PROGRESS
    if progress.is_file():
        for line in progress.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                shards = index["splits"][entry["split"]]["shards"]
                number = entry["shard"]
                if not isinstance(number, int) or not 0 <= number < len(shards):
                    continue
                written, skipped = int(entry["written"]), list(entry["skipped"])
                recorded = {key: entry.get(key) for key in ("inputs", "content", "bytes")}
                shards[number].update(done=True, written=written, skipped=skipped, **recorded)
            except (ValueError, KeyError, IndexError, TypeError, OverflowError, RecursionError):
                continue
    return index


def finish_shard(directory, split, number, shard, written, skipped, inputs, content=None):
    """Records a shard whose file is in place in its index entry `shard` and in a line of
    progress.jsonl, synced before the next. `inputs` and `content` are its `shard_inputs`
    and `shard_content`, taken before its images were read; `skipped`: [position, reason]."""
    size = os.path.getsize(Path(directory) / shard["file"])  # checked when the cache opens
    fields = dict(written=written, skipped=skipped, inputs=inputs, content=content, bytes=size)
    shard.update(done=True, **fields)
    line = json.dumps({"split": split, "shard": number, **fields})
    with open(Path(directory) / PROGRESS, "a", encoding="utf-8") as progress:
        progress.write(line + "\n")
        progress.flush()
        os.fsync(progress.fileno())


def compact_index(directory, index):
    """Folds progress.jsonl into index.json and removes killed writers' shard temporaries."""
    progress = directory / PROGRESS
    if progress.exists() and write_index(directory, index, needed=False):
        progress.unlink()
    with contextlib.suppress(OSError):  # a read-only cache keeps them: they are never read
        remove_temporaries(directory)


def open_extraction(directory, encoder, dataset, resize, dtype, compression):
    """(index, fingerprint) an extraction writes into, the folder created: the index there
    (progress applied) when made by the same fingerprint, else a new one; a KerasSaatError
    when it holds another fingerprint or version."""
    directory.mkdir(parents=True, exist_ok=True)
    fingerprint = extraction_fingerprint(encoder, dataset, resize, dtype, compression)
    if (directory / INDEX).is_file():
        index = read_index(directory)
        if index.get("version") != VERSION:
            raise KerasSaatError(
                f"the feature cache in {directory} has the layout of version "
                f"{index.get('version')}, this keras-saat reads version {VERSION}; delete the "
                "folder (it is extracted again) or choose another workdir"
            )
        if index.get("fingerprint") != fingerprint:
            stored = format_name(index.get("dtype"), index.get("compression", "none"))
            asked = format_name(dtype, compression)
            what = (
                f"the format {stored} (asked: {asked}; data.cache_dtype, data.cache_compression)"
                if stored != asked
                else "another backbone, weights, resize mode, compute precision "
                "(train.mixed_precision) or dataset"
            )
            raise KerasSaatError(
                f"the feature cache in {directory} was made with {what}; delete the folder "
                "or choose another workdir"
            )
        return index, fingerprint
    header = extraction_header(encoder, resize, dtype, compression)
    return new_index(header, fingerprint), fingerprint


def split_entry(directory, index, split, records, shard_size, log=print):
    """The index's entry of `split`, ready to extract. A new split's shard list is written
    before any shard is recorded; an existing split keeps its shard size, and its shards
    whose images changed are marked not done on disk before any shard file is replaced."""
    count = len(records)
    if split in index["splits"]:
        entry = index["splits"][split]
        if entry["shard_size"] != shard_size:
            log(
                f"  extract {split}: the cache keeps its shards of {entry['shard_size']} images "
                f"(a shard size of {shard_size} applies to a new cache)"
            )
    else:
        shards = max(1, -(-count // shard_size))
        entries = [
            {"file": shard_file(split, i, shards), "done": False, "written": 0, "skipped": []}
            for i in range(shards)
        ]
        set_split(index, split, count, shard_size, entries)
        write_index(directory, index)
    entry = index["splits"][split]
    changed, retimed = reopen_changed(entry, records, entry["shard_size"])
    # On disk before a shard file is replaced: the shards to write are not done (no hash).
    todo = [n for n in todo_shards(directory, entry) if entry["shards"][n]["done"]]
    for number in changed + todo:
        entry["shards"][number].update(done=False, content=None)
    if (changed or retimed or todo) and write_index(directory, index, needed=changed or todo):
        (Path(directory) / PROGRESS).unlink(missing_ok=True)  # its lines are in the index
    if retimed:
        log(f"  extract {split}: {len(retimed)} shard(s) kept: new file times, same bytes")
    if changed:
        log(f"  extract {split}: images changed in {len(changed)} shard(s) since extraction")
    return entry


def shard_records(records, number, shard_size):
    """The images of shard `number`, in position order."""
    return records[number * shard_size : (number + 1) * shard_size]


def reopen_changed(entry, records, shard_size):
    """Marks not done each finished shard whose images changed since it was written; one
    with new file times but the same bytes (a copied dataset) is kept. Returns (changed,
    retimed) shard numbers."""
    changed, retimed = [], []
    for number, shard in enumerate(entry["shards"]):
        images = shard_records(records, number, shard_size)
        if not shard["done"] or shard.get("inputs") == (inputs := shard_inputs(images)):
            continue
        if shard.get("content") and shard_content(images) == shard["content"]:
            shard["inputs"] = inputs
            retimed.append(number)
        else:
            shard["done"] = False
            changed.append(number)
    return changed, retimed


def todo_shards(directory, entry):
    """A split's shards to write: not finished, or finished with the file gone."""
    return [
        i
        for i, s in enumerate(entry["shards"])
        if not s["done"] or not (Path(directory) / s["file"]).is_file()
    ]


def says_todo(split, entry, todo, count, log=print):
    """Logs what a split's extraction has left; returns whether any shard is left to write."""
    shards = len(entry["shards"])
    if not todo:
        log(f"  extract {split}: cached ({count} images)")
        return False
    if len(todo) < shards:
        log(
            f"  extract {split}: {shards - len(todo)}/{shards} shards already done, "
            f"extracting the other {len(todo)}"
        )
    return True


def image_place(record):
    """How a skip names an image: its path and id, or its id when streamed."""
    if record.path is None:
        return f"image {record.imgid}"
    return f"{record.path} (image {record.imgid})"


def file_skip_reason(path):
    """Why an image file is not read (missing, or over MAX_FILE_BYTES), or None."""
    if path is None or not Path(path).is_file():  # a device or FIFO is not a file
        return MISSING
    if os.path.getsize(path) > MAX_FILE_BYTES:  # never read whole into memory
        return f"image file over {MAX_FILE_BYTES >> 20} MiB"
    return None


def skipped_entries(records, positions, written, shard_skips):
    """A finished shard's skips: [position, reason] for each position not `written`, sorted;
    "missing image file" where `shard_skips` says so, else "undecodable image"."""
    reported = {place: why for why, places in shard_skips.where.items() for place in places}
    entries = []
    for position in sorted(set(positions) - set(written)):
        place = image_place(records[position])
        if place not in reported:
            shard_skips.add(UNDECODABLE, place)
        entries.append([position, MISSING if reported.get(place) == MISSING else UNDECODABLE])
    return entries
