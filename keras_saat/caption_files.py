"""CaptionFile: one row per captioned image, as JSON lines or CSV, resumable.

    with CaptionFile("captions.jsonl") as out:      # rows already there are kept
        todo = [p for p in paths if str(p) not in out.done]
        for result in model.generate_stream(todo):
            out.write(result)

A row holds image, caption, log_prob and error ("" when captioned), and with
`attention=True` (JSON lines only) the attention grid of each generated token. A
file is rewritten once when opened, keeping its captioned rows and dropping rows
that failed, so a second run retries only the failures and skips the rest.
"""

import csv
import json
import os
from pathlib import Path

from keras_saat.errors import KerasSaatError

FORMATS = {".jsonl": "jsonl", ".csv": "csv"}
CSV_COLUMNS = ("image", "caption", "log_prob", "error")


class CaptionFile:
    """Appends caption rows to FILE.jsonl or FILE.csv, keeping rows a previous run wrote.

    Args:
        path: str or Path. Its suffix picks the format: .jsonl or .csv.
        attention: bool. Add each row's attention (tokens, grid_h, grid_w) as nested
            lists; JSON lines only. Defaults to False.
    """

    def __init__(self, path, attention=False):
        self.path = Path(path)
        self.format = self.check(path, attention)
        self.attention = attention
        # Captioned rows stay; failed ones and a half-written last row go (and run again).
        kept = [r for r in self._read() if r.get("error") == "" and r.get("caption") is not None]
        self.done = {row["image"] for row in kept}
        self._rewrite(kept)
        # Line-buffered: a killed run loses at most the row it was writing.
        self._file = self.path.open("a", buffering=1, newline="", encoding="utf-8")
        self._csv = None
        if self.format == "csv":
            self._csv = csv.DictWriter(self._file, CSV_COLUMNS)
            if self._file.tell() == 0:  # a new file (a kept one has its header)
                self._csv.writeheader()

    @staticmethod
    def check(path, attention=False):
        """The format `path` names ("jsonl" or "csv"), checked without touching the file.

        Args:
            path: str or Path. The --out file.
            attention: bool. Whether the rows carry attention grids. Defaults to False.

        Raises:
            KerasSaatError: another suffix, attention in a CSV file, or a missing folder.
        """
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
        return kind

    def _read(self):
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8")
        if self.format == "csv":
            rows = list(csv.DictReader(text.splitlines()))
            if rows and "image" not in rows[0]:
                raise KerasSaatError(f"{self.path} has no 'image' column; is it a caption file?")
            return rows
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                if number == len(text.splitlines()):
                    continue  # a run killed mid-line: that image is captioned again
                raise KerasSaatError(
                    f"{self.path} line {number} is not JSON; give another --out or remove it"
                ) from None
            if not isinstance(row, dict) or "image" not in row:
                raise KerasSaatError(f"{self.path} line {number} has no 'image'; is it ours?")
            rows.append(row)
        return rows

    def _rewrite(self, rows):
        if not self.path.exists():
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as out:
            if self.format == "csv":
                writer = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
            else:
                out.writelines(json.dumps(row) + "\n" for row in rows)
        os.replace(tmp, self.path)

    def write(self, result):
        """Appends one `Captioner.generate_stream` result."""
        row = {
            "image": str(result["image"]),
            "caption": result["caption"],
            "log_prob": None if result["log_prob"] is None else round(result["log_prob"], 5),
            "error": result["error"],
        }
        if self.format == "csv":
            self._csv.writerow({k: "" if v is None else v for k, v in row.items()})
        else:
            if self.attention:
                grid = result["attention"]
                row["attention"] = None if grid is None else grid.round(5).tolist()
            self._file.write(json.dumps(row) + "\n")
        if not row["error"]:
            self.done.add(row["image"])

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
