"""CaptionFile: one row per captioned image, as JSON lines or CSV, resumable.

    with CaptionFile("captions.jsonl") as out:      # rows already there are kept
        todo = [p for p in paths if str(p) not in out.done]
        for result in model.generate_stream(todo):
            out.write(result)

A file opened again is appended to once its failed rows and a torn last row are dropped,
so a second run retries only the failures. With `attention=True` (JSON lines only) the
attention grids go to `<stem>.attention/NNNNN.npy` beside the file, one float32 (rows,
steps, grid_h, grid_w) array per `SHARD_ROWS` rows, zero-padded to the shard's longest
caption; a row names its grid as `{"file", "row", "steps"}` (`read_attention`). A shard
is written when it fills and on close, so a killed run's unwritten rows are captioned again.
"""

import contextlib
import csv
import json
import os
import re
import stat
from pathlib import Path

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import atomic_path, raise_write_failure, whole_number

FORMATS = {".jsonl": "jsonl", ".csv": "csv"}
CSV_COLUMNS = ("image", "caption", "log_prob", "novelty", "familiar", "error")
SHARD_ROWS = 1000  # captioned rows per attention shard: at most ~16 MB held at 14x14


def attention_folder(path):
    """The side folder of a caption file's attention grids: <stem>.attention beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}.attention")


def attention_file(path, ref):
    """The shard a row's attention reference names; None for any other (outside) path."""
    name = ref.get("file") if isinstance(ref, dict) else None
    folder = attention_folder(path)
    if isinstance(name, str) and re.fullmatch(re.escape(folder.name) + r"/\d{5,}\.npy", name):
        return folder / name.split("/")[1]
    return None


def read_attention(path, row):
    """The (steps, grid_h, grid_w) attention maps of `row`, a row of the .jsonl file `path`;
    KerasSaatError where its reference names a file other than a shard beside `path`."""
    ref = row.get("attention")
    if ref is None:
        return None
    if isinstance(ref, list):  # a grid written inline, as earlier files hold them
        return np.asarray(ref, np.float32)
    file = attention_file(path, ref)
    if file is None:
        raise KerasSaatError(
            f"{path}: the row of {row.get('image')!r} names {str(ref.get('file'))[:200]!r} for its "
            f"attention; rows name shards in {attention_folder(path).name}/ only"
        )
    shard = np.load(file, mmap_mode="r")
    return np.array(shard[int(ref["row"]), : int(ref["steps"])])


class CaptionFile:
    """Appends caption rows to FILE.jsonl or FILE.csv, keeping rows a previous run wrote.

    Args:
        path: str or Path. Its suffix picks the format: .jsonl or .csv.
        attention: bool. Write each row's attention to the side folder; JSON lines only.
            Defaults to False.
    """

    def __init__(self, path, attention=False):
        self.path = Path(path)
        self.format = self.check(path, attention)
        self.attention = attention
        self._file = None
        self._columns = CSV_COLUMNS  # a kept CSV file's own header, when it has one (`_rows`)
        try:
            self._file = self._open_locked()
            self.done, dropped = self._scan()
            if dropped:
                self._drop_failed()
        except BaseException as err:
            if self._file is not None:
                self._file.close()
            raise_write_failure(err, self.path)
            raise
        self._grids, self._shard = [], self._next_shard() if attention else 0
        self._csv = None  # made with the first row: a header is a write

    @staticmethod
    def check(path, attention=False):
        """The format `path` names ("jsonl" or "csv"), checked without touching the file;
        KerasSaatError for another suffix, attention in CSV, a missing folder or a non-file."""
        path = Path(path)
        kind = FORMATS.get(path.suffix.lower())
        if kind is None:
            raise KerasSaatError(f"--out {path}: give a .jsonl (JSON lines) or .csv file name")
        if attention and kind != "jsonl":
            raise KerasSaatError(
                "attention grids do not fit a CSV cell; write JSON lines (--out FILE.jsonl)"
            )
        if not path.parent.is_dir():
            raise KerasSaatError(
                f"--out {path}: the folder {path.parent} does not exist; create it first"
            )
        if os.path.lexists(path) and not stat.S_ISREG(path.lstat().st_mode):
            raise KerasSaatError(
                f"--out {path} is not a regular file (a link, folder or FIFO); give a file name"
            )
        return kind

    def _open_locked(self):
        """The file opened for appending, line-buffered, under this process's exclusive lock
        (a rewrite locks its new file before it takes the name, so no run appends to a
        replaced file); KerasSaatError where another process is writing it."""
        while True:
            handle = self.path.open("a", buffering=1, newline="", encoding="utf-8")
            try:
                _lock(handle, self.path)
                if os.fstat(handle.fileno()).st_ino == os.stat(self.path).st_ino:
                    return handle
            except BaseException:
                handle.close()
                raise
            handle.close()  # locked a file that another run had just replaced: again

    def _keep(self, row):
        """A row stays when it was captioned (and its attention shard, if any, exists)."""
        if row.get("error") != "" or row.get("caption") is None:
            return False
        ref = row.get("attention")
        if isinstance(ref, dict):
            file = attention_file(self.path, ref)
            return file is not None and file.is_file()
        return True

    def _rows(self):
        """Each row, or None for a blank line or a torn last one; a BOM is read past."""
        with self.path.open(newline="", encoding="utf-8-sig") as file:
            if self.format == "csv":
                reader = csv.DictReader(file)
                try:
                    if reader.fieldnames is not None:  # rows appended keep its columns
                        if "image" not in reader.fieldnames:
                            raise KerasSaatError(
                                f"{self.path} has no 'image' column; is it a caption file?"
                            )
                        self._columns = tuple(reader.fieldnames)
                    yield from reader
                except csv.Error as err:
                    raise KerasSaatError(
                        f"{self.path} line {reader.line_num} is not CSV ({err}); give another "
                        "--out or remove it"
                    ) from None
                return
            previous = None
            for number, line in enumerate(file):  # `previous` is line `number`, from 1
                if previous is not None:
                    yield self._parse(previous, number, last=False)
                previous = line
            if previous is not None:
                yield self._parse(previous, number + 1, last=True)

    def _parse(self, line, number, last):
        if not line.strip():
            return None
        try:
            row = json.loads(line)
        except ValueError:
            if last:
                return None  # a run killed mid-line: that image is captioned again
            raise KerasSaatError(
                f"{self.path} line {number} is not JSON; give another --out or remove it"
            ) from None
        if not isinstance(row, dict) or "image" not in row:
            raise KerasSaatError(f"{self.path} line {number} has no 'image'; is it ours?")
        return row

    def _scan(self):
        """(captioned image names, whether the file must be rewritten), a row at a time."""
        done, dropped = set(), False
        if not self.path.exists():
            return done, dropped
        for row in self._rows():
            if row is not None and self._keep(row):
                done.add(row["image"])
            elif row is not None or self.format == "jsonl":
                dropped = True
        with self.path.open("rb") as file:
            if file.seek(0, 2) > 0:
                file.seek(-1, 2)
                dropped = dropped or file.read(1) != b"\n"
        return done, dropped

    def _drop_failed(self):
        """Rewrites the file without its failed rows and torn last line, locked before the
        copy takes its name; the copy is appended to next."""
        with atomic_path(self.path) as tmp:
            out = tmp.open("w", buffering=1, newline="", encoding="utf-8")
            try:
                _lock(out, self.path)
                writer = None
                if self.format == "csv":
                    writer = csv.DictWriter(out, self._columns, extrasaction="ignore")
                    writer.writeheader()
                for row in self._rows():
                    if row is None or not self._keep(row):
                        continue
                    if writer is not None:
                        writer.writerow(row)
                    else:
                        out.write(json.dumps(row) + "\n")
                out.flush()
                os.fsync(out.fileno())
            except BaseException:
                out.close()
                raise
        self._file.close()
        self._file = out

    def _next_shard(self):
        """The first attention shard number after those already in the side folder."""
        folder = attention_folder(self.path)
        numbers = (whole_number(p.stem) for p in folder.glob("*.npy"))
        return max((n for n in numbers if n is not None), default=-1) + 1

    def write(self, result):
        """Appends one `Captioner.generate_stream` result; FileWriteError where the file
        system refuses it (the rows before it are kept)."""
        try:
            self._write(result)
        except OSError as err:
            raise_write_failure(err, self.path)
            raise

    def _write(self, result):
        if self.format == "csv" and self._csv is None:
            # A file a version without some columns began keeps its header and columns.
            self._csv = csv.DictWriter(self._file, self._columns, extrasaction="ignore")
            if self._file.tell() == 0:  # a new file (a kept one has its header)
                self._csv.writeheader()
        row = {
            "image": str(result["image"]),
            "caption": result["caption"],
            "log_prob": None if result["log_prob"] is None else round(result["log_prob"], 5),
            "novelty": _novelty(result.get("novelty")),
            "familiar": result.get("familiar"),
            "error": result["error"],
        }
        if self.format == "csv":
            self._csv.writerow({k: "" if v is None else v for k, v in row.items()})
        else:
            if self.attention:
                row["attention"] = self._add_grid(result["attention"])
            self._file.write(json.dumps(row) + "\n")
        if not row["error"]:
            self.done.add(row["image"])
        if len(self._grids) >= SHARD_ROWS:
            self._flush_grids()

    def _add_grid(self, grid):
        if grid is None:
            return None
        grid = np.asarray(grid, np.float32)
        name = f"{attention_folder(self.path).name}/{self._shard:05d}.npy"
        self._grids.append(grid)
        return {"file": name, "row": len(self._grids) - 1, "steps": int(grid.shape[0])}

    def _flush_grids(self):
        """Writes the held grids as one shard (atomically: a shard is whole or absent)."""
        if not self._grids:
            return
        folder = attention_folder(self.path)
        folder.mkdir(exist_ok=True)
        steps = max(g.shape[0] for g in self._grids)
        shard = np.zeros((len(self._grids), steps, *self._grids[0].shape[1:]), np.float32)
        for i, grid in enumerate(self._grids):
            shard[i, : grid.shape[0]] = grid
        self._file.flush()  # the rows naming the shard are on disk before it
        with atomic_path(folder / f"{self._shard:05d}.npy", suffix=".npy") as tmp:
            np.save(tmp, shard)
        self._grids, self._shard = [], self._shard + 1

    def close(self):
        """Writes the held attention grids and closes the file, its rows on disk."""
        if self._file.closed:
            return
        try:
            self._flush_grids()
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as err:
            with contextlib.suppress(OSError):  # its buffer cannot be written either
                self._file.close()
            raise_write_failure(err, self.path)
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _novelty(value):
    """A row's novelty to 4 decimals, None where not measured, so the JSON lines stay JSON."""
    return None if value is None or value != value else round(float(value), 4)


def _lock(handle, path):
    """This process's exclusive flock on the open `handle` (nothing without flock): filelock
    locks a file of its own, so it cannot lock the rows' file itself."""
    try:
        import fcntl
    except ImportError:
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise KerasSaatError(
            f"--out {path} is being written by another keras-saat caption run; wait for it "
            "to end (this run then captions only what it left), or give another --out"
        ) from None
