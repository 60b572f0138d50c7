"""Reader for your own captions: one row per (image, caption) in CSV, TSV or JSON lines.

    image,caption,split                      # CSV (.csv) or tab-separated (.tsv; .txt either)
    photos/dog.jpg,A dog runs on the beach.,train
    photos/dog.jpg,A brown dog at the sea.,train

    {"image": "photos/cat.png", "caption": "A cat asleep.", "split": "val"}   # .jsonl

`image` is relative to the captions file (or `data.images_dir`). Without a split column,
images go to train, val and test (80/10/10) by a hash of their path, so adding rows never
moves an image. Every row is checked first and all problems reported at once, with file
and line. An image file is only stat-ed, never opened (the feature cache reuses that
stat); a missing image is skipped and counted (an error with `data.strict`).
"""

import csv
import hashlib
import itertools
import json
import os
import stat
from pathlib import Path

from keras_saat.data.readers.caption_dataset import SPLITS, ImageRecord, Skips, check_file, finish
from keras_saat.errors import KerasSaatError
from keras_saat.text.tokenizer import has_words

FORMATS = {".csv": ",", ".tsv": "\t", ".txt": "\t", ".jsonl": None}
AUTO_SPLIT = (("train", 0.8), ("val", 0.9), ("test", 1.0))  # cumulative fractions
MAX_LISTED = 20  # problems shown in the error; the rest are counted
# The longest line read: a row is an image path and one caption (COCO's longest caption
# is about 250 characters), so a longer line is a bad row, skipped unread.
MAX_LINE_BYTES = 64 * 1024
COLUMNS = ("image", "caption", "split")
MISSING = "missing image file"
STRICT_TEXT = {MISSING: "image file not found"}  # a skip's reason as a strict error says it


def _lines(handle):
    """(line number, text) of each line of a binary file, split at "\n" only (JSON and CSV
    values may hold U+2028 or U+0085); a line over MAX_LINE_BYTES gives a ValueError."""
    for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = handle.readline(MAX_LINE_BYTES)
            yield number, ValueError(f"a line over {MAX_LINE_BYTES} bytes; a row is one caption")
            continue
        text = line.decode("utf-8", errors="surrogateescape").rstrip("\n").removesuffix("\r")
        yield number, text.removeprefix("\ufeff") if number == 1 else text


def _json_row(line):
    try:
        row = json.loads(line)
    except ValueError as err:
        raise ValueError(f"not a JSON object: {getattr(err, 'msg', err)}") from None
    except RecursionError:
        raise ValueError("not a JSON object: nested too deeply") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    return row


def _fields(line, delimiter):
    """A CSV line's fields (a quote must close on its line, so a stray one cannot swallow
    later rows), or a TSV line's (unquoted)."""
    if delimiter == "\t":
        return line.split("\t")
    try:
        return next(csv.reader([line], delimiter=delimiter, strict=True), [])
    except csv.Error as err:
        if "unexpected end of data" in str(err):
            raise ValueError(
                'a quoted field (") that does not close on its line; a caption is one line, '
                'and a quote inside a quoted field is written ""'
            ) from None
    # Text after a closing quote ("Quoted" caption): read as spreadsheets read it.
    return next(csv.reader([line], delimiter=delimiter), [])


def _table_row(columns, delimiter):
    def parse(line):
        fields = _fields(line, delimiter)
        if len(fields) != len(columns):
            kind = "tab-separated" if delimiter == "\t" else "comma-separated"
            raise ValueError(
                f"{len(fields)} {kind} fields where the first line names {len(columns)}"
            )
        return dict(zip(columns, fields, strict=True))

    return parse


def _header(path, lines, delimiter):
    """The columns of a CSV/TSV file's first line; a KerasSaatError without image or caption."""
    header = next(lines, (1, ""))[1]
    columns = (
        [] if isinstance(header, Exception) else [c.strip() for c in _fields(header, delimiter)]
    )
    missing = {"image", "caption"} - set(columns)
    if missing:
        raise KerasSaatError(
            f"{path}: the first line must name the columns image and caption (and optionally "
            f"split); it has no {', '.join(sorted(missing))} column "
            f"(columns: {', '.join(columns or ['none'])})"
        )
    return columns


def _rows(path):
    """(line number, dict or the ValueError that makes it a bad row) per row of a CSV/TSV
    (with a header) or JSON lines file, read a line at a time; blank lines are skipped."""
    with path.open("rb") as handle:
        delimiter = FORMATS[path.suffix.lower()]
        lines = _lines(handle)
        if delimiter is None:
            parse = _json_row
        else:
            if path.suffix.lower() == ".txt":  # tab-separated, or a CSV saved as .txt
                first = next(lines, (1, ""))
                header = first[1] if isinstance(first[1], str) else ""
                delimiter = "\t" if "\t" in header or "," not in header else ","
                lines = itertools.chain([first], lines)
            parse = _table_row(_header(path, lines, delimiter), delimiter)
        for number, line in lines:
            if isinstance(line, Exception):
                yield number, line
            elif line.strip():
                try:
                    yield number, parse(line)
                except ValueError as err:
                    yield number, err


def _stat_file(path):
    """(a regular file's "size|mtime_ns" stamp or None, and why none: MISSING or "not a
    regular file")."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None, MISSING
    if not stat.S_ISREG(found.st_mode):
        return None, "not a regular file"
    return f"{found.st_size}|{found.st_mtime_ns}", ""


def auto_split(name):
    """train, val or test for an image, from a hash of its path (stable across runs)."""
    fraction = int(hashlib.sha256(name.encode("utf-8")).hexdigest()[:8], 16) / 16**8
    return next(split for split, upto in AUTO_SPLIT if fraction < upto)


def read_caption_table(path, images_dir=None, strict=False):
    """Reads a captions file (CSV, TSV or JSON lines) into a CaptionDataset.

    Args:
        path: str or Path. The captions file; its suffix picks the format.
        images_dir: str, Path or None. Folder the image paths are relative to.
            Defaults to None (the captions file's folder).
        strict: bool. A missing image file is an error too (listed with the other bad
            rows) instead of being skipped and counted. Defaults to False.

    Raises:
        KerasSaatError: listing every bad row, with file and line.
    """
    path = check_file(path, "captions file")
    if path.suffix.lower() not in FORMATS:
        raise KerasSaatError(
            f"{path}: captions files are .csv, .tsv (or .txt, tab-separated) or .jsonl"
        )
    root = Path(images_dir) if images_dir else path.parent
    problems, records, split_of, has_split, first = [], {}, {}, None, None
    skips, missing = Skips(), set()
    for number, row in _rows(path):
        where = f"{path}:{number}"
        if isinstance(row, Exception):
            problems.append(f"{where}: {row}")
            continue
        image, caption, split = (row.get(key) for key in COLUMNS)
        if any(not isinstance(v, str) for v in (image, caption, split) if v is not None):
            problems.append(f"{where}: image, caption and split must be text")
            continue
        split = (split or "").strip().lower()
        if any("\udc80" <= c <= "\udcff" for v in row.values() if isinstance(v, str) for c in v):
            problems.append(f"{where}: text that is not UTF-8")
            continue
        if not isinstance(image, str) or not image.strip():
            problems.append(f"{where}: no image path")
            continue
        if not isinstance(caption, str) or not has_words(caption):
            problems.append(f"{where}: empty caption for {image}")
            continue
        row_has_split = "split" in row and split != ""
        if has_split is None:
            has_split, first = row_has_split, number
        elif has_split != row_has_split:
            problems.append(
                f"{where}: {'a' if row_has_split else 'no'} split, unlike line {first}; give "
                "every row a split or none"
            )
            continue
        if row_has_split and split not in SPLITS:
            problems.append(f"{where}: split {split!r} is not train, val or test")
            continue
        name = image.strip()
        split = split or auto_split(name)
        if split_of.setdefault(name, split) != split:
            problems.append(f"{where}: {name} is in {split_of[name]} on an earlier line")
            continue
        if name in missing:  # its other captions go with it
            continue
        if name not in records:
            file = root / name
            found, why = _stat_file(file)  # one stat; the contents are checked at extraction
            if found is None:
                if strict:
                    problems.append(f"{where}: {STRICT_TEXT.get(why, why)}: {file}")
                else:
                    skips.add(why, f"{where}: {file}")
                missing.add(name)
                continue
            records[name] = ImageRecord(
                imgid=len(records), path=file, split=split, captions=[], stamp=found
            )
        records[name].captions.append(caption)
    if problems:
        shown = "\n  ".join(problems[:MAX_LISTED])
        more = (
            f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        )
        raise KerasSaatError(
            f"{path}: {len(problems)} bad row{'s' if len(problems) > 1 else ''}; fix them and run "
            f"again:\n  {shown}{more}"
        )
    return finish(path.stem, list(records.values()), skips, str(path))
