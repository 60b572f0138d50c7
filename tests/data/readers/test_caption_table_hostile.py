"""Captions tables and dataset files crafted to lose rows or end in a traceback: each is
read whole or named, row by row, and a long line costs its bound, not the file."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from keras_saat.data.readers.caption_table import MAX_LINE_BYTES, read_caption_table
from keras_saat.data.readers.coco import read_coco
from keras_saat.data.readers.karpathy import read_karpathy
from keras_saat.errors import KerasSaatError
from tests.helpers import ROOT, cap_address_space


@pytest.fixture
def photos(tmp_path):
    (tmp_path / "photos").mkdir()
    for name in "abcdef":
        (tmp_path / "photos" / f"{name}.png").write_bytes(b"\x89PNG")
    return tmp_path


def problems(path):
    with pytest.raises(KerasSaatError) as err:
        read_caption_table(path)
    return str(err.value)


def test_a_tsv_caption_that_starts_with_a_quote_keeps_the_rows_after_it(photos):
    lines = ["image\tcaption", 'photos/a.png\t"quoted" at the start, never closed']
    lines += [f"photos/{n}.png\ta caption of {n}" for n in "bcdef"]
    path = photos / "c.tsv"
    path.write_text("\n".join(lines) + "\n")
    dataset = read_caption_table(path)
    assert len(dataset.records) == 6
    assert dataset.records[0].captions == ['"quoted" at the start, never closed']
    path.write_text("image\tcaption\nphotos/a.png\ta tab\there\nphotos/b.png\tfine\n")
    assert "c.tsv:2: 3 tab-separated fields where the first line names 2" in problems(path)


def test_a_csv_quote_that_does_not_close_is_named_and_the_next_rows_stay(photos):
    path = photos / "c.csv"
    path.write_text('image,caption\nphotos/a.png,"never closed\nphotos/b.png,"fine" here\n')
    message = problems(path)
    assert 'c.csv:2: a quoted field (") that does not close on its line' in message
    assert "1 bad row" in message  # line 3 read as its own row
    # An Excel export: a byte-order mark before the header, CRLF line ends.
    path.write_bytes(b'\xef\xbb\xbfimage,caption\r\nphotos/a.png,"a, b"\r\n')
    assert read_caption_table(path).records[0].captions == ["a, b"]


def test_json_lines_hold_line_separators_inside_strings(photos):
    path = photos / "c.jsonl"
    rows = [{"image": "photos/a.png", "caption": "one\u2028two\x85three"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "[1]\n")
    assert "c.jsonl:2: not a JSON object" in problems(path)  # line 2, not 3 or 4
    path.write_text(json.dumps(rows[0], ensure_ascii=False) + "\n")
    assert read_caption_table(path).records[0].captions == ["one\u2028two\x85three"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "c.jsonl:1: a line over"),
        ("[" * 30_000 + "]" * 30_000, "c.jsonl:1: not a JSON object: nested too deeply"),
        ('{"image": "photos/a.png", "caption": "x", "split": 5}', "must be text"),
        ('{"image": 7, "caption": "x"}', "c.jsonl:1: image, caption and split must be text"),
    ],
)
def test_json_lines_that_are_not_rows_are_named(photos, line, message):
    path = photos / "c.jsonl"
    path.write_text(line + "\n" + '{"image": "photos/b.png", "caption": "fine"}\n')
    assert message in problems(path)


def test_a_folder_or_fifo_where_an_image_should_be_is_named_so(photos):
    (photos / "photos" / "dir.png").mkdir()
    os.mkfifo(photos / "photos" / "fifo.png")
    path = photos / "c.csv"
    path.write_text("image,caption\nphotos/dir.png,x\nphotos/fifo.png,y\nphotos/a.png,z\n")
    dataset = read_caption_table(path)
    assert dataset.skips.summary()[0].startswith("skipped 2 x not a regular file")


def test_a_long_line_costs_its_bound_not_the_file(photos):
    """A 36 MB caption line and a 100,000-row table, read in a child capped at what it holds
    after its imports plus 96 MiB."""
    long = photos / "long.tsv"
    with long.open("w") as out:
        out.write("image\tcaption\nphotos/a.png\t" + "word " * 7_200_000 + "\nphotos/b.png\tok\n")
    many = photos / "many.tsv"
    with many.open("w") as out:
        out.write("image\tcaption\n")
        for i in range(100_000):
            out.write(f"photos/{'abcdef'[i % 6]}.png\ta caption of row {i} with some words\n")
    script = textwrap.dedent(f"""
        from keras_saat.data.readers.caption_table import read_caption_table
        from keras_saat.errors import KerasSaatError
        {cap_address_space(96 * 1024 * 1024)}
        try:
            read_caption_table({str(long)!r})
        except KerasSaatError as err:
            print(str(err).splitlines()[1].strip())
        print(len(read_caption_table({str(many)!r}).records))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].endswith(
        f"long.tsv:2: a line over {MAX_LINE_BYTES} bytes; a row is one caption"
    )
    assert lines[1] == "6"


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ({"imgid": "seven"}, "images[0].imgid must be an integer"),
        ({"filename": 7}, "images[0].filename must be a string"),
        ({"filepath": ["a"]}, "images[0].filepath must be a string"),
        ({"split": ["train"]}, "images[0].split must be a string"),
    ],
)
def test_a_karpathy_field_of_the_wrong_type_is_named(tmp_path, image, message):
    entry = {"filename": "a.png", "split": "train", "sentences": [{"raw": "a cat"}], **image}
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": [entry]}))
    with pytest.raises(KerasSaatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_karpathy(path)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(KerasSaatError, match="nested too deeply"):
        read_karpathy(path)
    path.write_text('{"images": [], "n": ' + "9" * 5000 + "}")
    with pytest.raises(KerasSaatError, match="holds a value that cannot be read"):
        read_karpathy(path)


def test_a_coco_id_of_the_wrong_type_is_named(tmp_path):
    folder = tmp_path / "annotations"
    folder.mkdir()
    good = {"images": [{"id": 1, "file_name": "a.jpg"}],
            "annotations": [{"image_id": 1, "caption": "a cat"}]}  # fmt: skip
    (folder / "captions_val2014.json").write_text(json.dumps(good))
    bad = {"images": [{"id": [1], "file_name": "a.jpg"}], "annotations": []}
    (folder / "captions_train2014.json").write_text(json.dumps(bad))
    with pytest.raises(KerasSaatError, match="needs an integer 'id'"):
        read_coco(folder / "captions_train2014.json", folder / "captions_val2014.json")
    bad = {"images": [], "annotations": [{"image_id": {"x": 1}, "caption": "a"}]}
    (folder / "captions_train2014.json").write_text(json.dumps(bad))
    with pytest.raises(KerasSaatError, match=r"annotations\[0\].image_id must be an integer"):
        read_coco(folder / "captions_train2014.json", folder / "captions_val2014.json")
