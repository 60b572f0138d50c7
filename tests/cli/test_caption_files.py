"""CaptionFile at scale: reopening reads a row at a time and appends without rewriting,
and attention grids go to .npy shards beside the file, never inline."""

import json
import tracemalloc

import numpy as np

from keras_saat.cli import caption_files
from keras_saat.cli.caption_files import CaptionFile, attention_folder, read_attention


def result(i, steps=None, error=""):
    grid = None
    if steps is not None:
        grid = np.random.default_rng(i).random((steps, 4, 4)).astype(np.float32)
    return {
        "image": f"img{i}.png",
        "caption": None if error else f"a caption {i}",
        "log_prob": None if error else -1.5,
        "error": error,
        "attention": grid,
    }


def test_attention_goes_to_npy_shards_a_thousand_rows_each(tmp_path):
    out = tmp_path / "caps.jsonl"
    with CaptionFile(out, attention=True) as file:
        for i in range(2500):
            file.write(result(i, steps=3 + i % 5))
    lines = out.read_text().splitlines()
    assert len(lines) == 2500 and max(len(line) for line in lines) < 200  # no grid inline
    folder = attention_folder(out)
    assert sorted(p.name for p in folder.iterdir()) == ["00000.npy", "00001.npy", "00002.npy"]
    assert np.load(folder / "00002.npy").shape == (500, 7, 4, 4)
    for i in (0, 999, 1000, 2499):
        np.testing.assert_array_equal(
            read_attention(out, json.loads(lines[i])), result(i, steps=3 + i % 5)["attention"]
        )


def test_a_killed_run_captions_again_the_rows_whose_shard_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(caption_files, "SHARD_ROWS", 10)
    out = tmp_path / "caps.jsonl"
    file = CaptionFile(out, attention=True)
    for i in range(25):
        file.write(result(i, steps=2))
    file._file.close()  # killed: rows 20-24 are on disk, their shard never written
    (attention_folder(out) / "².npy").write_bytes(b"")  # not a shard: "²" passes isdigit()
    again = CaptionFile(out, attention=True)
    assert again.done == {f"img{i}.png" for i in range(20)}
    assert len(out.read_text().splitlines()) == 20
    for i in range(20, 25):
        again.write(result(i, steps=2))
    again.close()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["image"] for r in rows] == [f"img{i}.png" for i in range(25)]
    assert rows[-1]["attention"]["file"] == "caps.attention/00002.npy"
    np.testing.assert_array_equal(read_attention(out, rows[-1]), result(24, steps=2)["attention"])


def test_reopening_a_captioned_file_appends_without_rewriting_it(tmp_path):
    out = tmp_path / "caps.jsonl"
    with CaptionFile(out) as file:
        for i in range(50):
            file.write(result(i))
    inode, before = out.stat().st_ino, out.read_bytes()
    with CaptionFile(out) as file:
        assert len(file.done) == 50
        file.write(result(50))
    assert out.stat().st_ino == inode and out.read_bytes().startswith(before)
    with CaptionFile(out) as file:
        file.write(result(51, error="not an image"))
    with CaptionFile(out) as file:  # the failed row goes, the rest stay in order
        assert len(file.done) == 51
    assert out.read_bytes().startswith(before)
    assert len(out.read_text().splitlines()) == 51


def test_reopening_holds_one_row_at_a_time_not_the_file(tmp_path):
    """Rows with large inline grids (as earlier files have): reopening keeps the names only."""
    out = tmp_path / "caps.jsonl"
    grid = np.full((20, 14, 14), 0.123456, np.float32).round(5).tolist()  # ~40 KB of JSON
    with out.open("w") as file:
        for i in range(300):
            row = {"image": f"img{i}.png", "caption": "a", "log_prob": -1.0, "error": ""}
            file.write(json.dumps({**row, "attention": grid}) + "\n")
    assert out.stat().st_size > 10_000_000
    tracemalloc.start()
    try:
        reopened = CaptionFile(out, attention=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    reopened.close()
    assert len(reopened.done) == 300
    assert peak < 3_000_000, peak  # one row's JSON and its parse, not 300 of them


def test_a_kept_last_row_without_its_newline_is_ended_before_rows_are_appended(tmp_path):
    for name, text in [("caps.jsonl", json.dumps(result(0)) + "\n" + json.dumps(result(1))),
                       ("caps.csv", "image,caption,log_prob,error\nimg0.png,a cap,-1.5,")]:  # fmt: skip
        out = tmp_path / name
        out.write_text(text)
        with CaptionFile(out) as file:
            file.write(result(7))
        if name.endswith(".jsonl"):
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            assert [r["image"] for r in rows] == ["img0.png", "img1.png", "img7.png"]
        else:
            assert out.read_text().splitlines()[1:] == [
                "img0.png,a cap,-1.5,",
                "img7.png,a caption 7,-1.5,",
            ]


def test_an_excel_csv_with_a_byte_order_mark_is_a_caption_file(tmp_path):
    out = tmp_path / "caps.csv"
    out.write_bytes(b"\xef\xbb\xbfimage,caption,log_prob,error\r\nimg0.png,a cap,-1.5,\r\n")
    assert CaptionFile(out).done == {"img0.png"}


def test_out_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path):
    import os

    import pytest

    from keras_saat.errors import KerasSaatError

    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "victim.jsonl").write_text("")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "victim.jsonl")
    for name in ("fifo.jsonl", "folder.csv", "link.jsonl"):
        with pytest.raises(KerasSaatError, match="is not a regular file .*; give a file name"):
            CaptionFile.check(tmp_path / name)


def test_an_attention_reference_out_of_its_folder_is_never_followed(tmp_path):
    import pytest

    from keras_saat.errors import KerasSaatError

    out = tmp_path / "run" / "caps.jsonl"
    out.parent.mkdir()
    np.save(tmp_path / "elsewhere.npy", np.ones((1, 3, 4, 4), np.float32))
    row = {**result(0), "attention": {"file": "../elsewhere.npy", "row": 0, "steps": 3}}
    out.write_text(json.dumps(row) + "\n")
    with pytest.raises(KerasSaatError, match="rows name shards in caps.attention/ only"):
        read_attention(out, row)
    assert CaptionFile(out, attention=True).done == set()  # captioned again, not trusted


def test_rows_carry_novelty_and_familiar_and_an_older_csv_keeps_its_columns(tmp_path):
    out = tmp_path / "caps.csv"
    with CaptionFile(out) as file:
        file.write({**result(0), "novelty": 3.14159, "familiar": False})
        file.write({**result(1), "novelty": float("nan"), "familiar": True})  # never calibrated
    lines = out.read_text().splitlines()
    assert lines[0] == "image,caption,log_prob,novelty,familiar,error"
    assert lines[1:] == [
        "img0.png,a caption 0,-1.5,3.1416,False,",
        "img1.png,a caption 1,-1.5,,True,",
    ]
    jsonl = tmp_path / "caps.jsonl"
    with CaptionFile(jsonl) as file:
        file.write({**result(0), "novelty": 0.5, "familiar": True})
        file.write({**result(1, error="truncated"), "novelty": None, "familiar": None})
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert (rows[0]["novelty"], rows[0]["familiar"]) == (0.5, True)
    assert (rows[1]["novelty"], rows[1]["familiar"]) == (None, None)

    older = tmp_path / "older.csv"  # written before the columns existed
    older.write_text("image,caption,log_prob,error\nimg0.png,a caption 0,-1.5,\n")
    with CaptionFile(older) as file:
        assert file.done == {"img0.png"}
        file.write({**result(1), "novelty": 2.0, "familiar": False})
    assert older.read_text().splitlines()[1:] == [
        "img0.png,a caption 0,-1.5,",
        "img1.png,a caption 1,-1.5,",
    ]
