"""Your own captions: CSV, TSV and JSON lines read alike, every bad row listed at once, and
a model trained, evaluated and used on a folder made here."""

import csv
import json
import shutil

import pytest

from keras_saat.cli import main
from keras_saat.data.readers.caption_table import auto_split, read_caption_table
from keras_saat.data.readers.karpathy import read_karpathy
from keras_saat.errors import KerasSaatError
from keras_saat.evaluation.coco_metrics import java_available
from tests.helpers import DEFAULTS


@pytest.fixture
def folder(shapes_dir, tmp_path):
    """photos/ with 12 Shapes images, and their reference captions as (relative path, caption)."""
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    (tmp_path / "photos").mkdir()
    rows = []
    for record in dataset.records[:12]:
        shutil.copy(record.path, tmp_path / "photos" / record.path.name)
        rows += [(f"photos/{record.path.name}", caption) for caption in record.captions[:2]]
    return tmp_path, rows


def write(path, rows, header=("image", "caption")):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(header, r, strict=True))) + "\n" for r in rows))
        return path
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, delimiter="," if path.suffix == ".csv" else "\t")
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_the_three_formats_read_alike_with_a_stable_automatic_split(folder, suffix):
    root, rows = folder
    dataset = read_caption_table(write(root / f"captions{suffix}", rows))
    assert len(dataset.records) == 12 and all(len(r.captions) == 2 for r in dataset.records)
    for record in dataset.records:
        assert record.path.is_file() and record.split == auto_split(f"photos/{record.path.name}")
    shuffled = write(root / f"shuffled{suffix}", rows[::-1])
    again = {r.path.name: r.split for r in read_caption_table(shuffled).records}
    assert again == {r.path.name: r.split for r in dataset.records}


def test_a_split_column_decides_the_split(folder):
    root, rows = folder
    splits = ["train"] * 16 + ["val"] * 4 + ["test"] * 4
    table = [(*row, split) for row, split in zip(rows, splits, strict=True)]
    dataset = read_caption_table(write(root / "c.csv", table, ("image", "caption", "split")))
    assert dataset.counts() == {"train": 8, "val": 2, "test": 2}


def test_every_bad_row_is_listed_with_its_file_and_line(folder):
    root, rows = folder
    (root / "photos" / "notes.png").write_text("not an image")
    bad = [
        *rows[:2],
        ("photos/missing.png", "a caption"),  # line 4
        (rows[2][0], "   "),  # line 5
        ("photos/notes.png", "a caption"),  # line 6
        (rows[3][0], "caf\udce9 au lait"),  # line 7: written as a byte that is not UTF-8
        (rows[4][0], "a caption", "tomorrow"),  # line 8
    ]
    path = root / "bad.csv"
    with path.open("w", newline="", encoding="utf-8", errors="surrogateescape") as out:
        writer = csv.writer(out)
        writer.writerow(("image", "caption", "split"))
        writer.writerows([(*r, "train") if len(r) == 2 else r for r in bad])
    with pytest.raises(KerasSaatError) as err:
        read_caption_table(path, strict=True)
    message = str(err.value)
    assert "4 bad rows" in message  # notes.png is not opened here: extraction counts it
    for line, what in [
        (4, "image file not found"),
        (5, "empty caption"),
        (7, "text that is not UTF-8"),
        (8, "split 'tomorrow' is not train, val or test"),
    ]:
        assert f"bad.csv:{line}: {what}" in message, message


def test_missing_images_are_skipped_and_counted_unless_strict(folder):
    root, rows = folder
    gone = [(f"photos/gone{i}.png", f"a caption {j}") for i in range(3) for j in range(2)]
    path = write(root / "c.csv", rows + gone)
    dataset = read_caption_table(path)
    assert len(dataset.records) == 12  # the 12 present images, all their captions
    assert dataset.skips.total == 3  # one per missing image, not per row
    (line,) = [x for x in dataset.skips.summary() if "missing image file" in x]
    assert line.startswith("skipped 3 x missing image file (first: ")
    assert "c.csv:26: " in line and "gone0.png" in line
    with pytest.raises(KerasSaatError, match="3 bad rows") as err:
        read_caption_table(path, strict=True)
    assert "c.csv:26: image file not found" in str(err.value)


def test_image_files_are_looked_up_never_opened(folder):
    """Reading a captions file stats each image once; the bytes are read (and a bad image
    skipped and counted) only when the features are extracted."""
    root, rows = folder
    for file in (root / "photos").iterdir():
        file.write_bytes(b"not an image header")
    dataset = read_caption_table(write(root / "c.csv", rows))
    assert len(dataset.records) == 12 and dataset.skips.total == 0


def test_missing_columns_and_unknown_formats_are_named(folder):
    root, rows = folder
    with pytest.raises(KerasSaatError, match="has no caption column"):
        read_caption_table(write(root / "c.csv", rows, ("image", "text")))
    (root / "c.xlsx").write_text("")
    with pytest.raises(KerasSaatError, match=r"\.csv, \.tsv .* or \.jsonl"):
        read_caption_table(root / "c.xlsx")
    (root / "c.jsonl").write_text('{"image": "x.png", "caption": "a"}\n[1, 2]\nnot json\n')
    with pytest.raises(KerasSaatError) as err:
        read_caption_table(root / "c.jsonl")
    assert "c.jsonl:2: not a JSON object" in str(err.value)
    assert "c.jsonl:3: not a JSON object" in str(err.value)


@pytest.mark.slow
def test_captions_file_to_train_evaluate_and_caption(folder, capsys):
    """The README's how-to: caption file -> train -> evaluate -> caption new images."""
    root, rows = folder
    splits = (["train"] * 8 + ["val"] * 2 + ["test"] * 2) * 1
    by_image = dict(zip(sorted({r[0] for r in rows}), splits, strict=True))
    table = [(image, caption, by_image[image]) for image, caption in rows]
    captions = write(root / "captions.csv", table, ("image", "caption", "split"))
    workdir = root / "run"
    argv = ["train", "--config", DEFAULTS, "--workdir", str(workdir)]
    for setting in ("data.dataset=captions", f"data.path={captions}", "train.epochs=1",
                    "train.batch_size=8", "decode.max_length=6", "decode.meteor=false"):  # fmt: skip
        argv += ["--set", setting]
    assert main(argv) == 0
    assert main(["evaluate", "--workdir", str(workdir), "--split", "test"]) == 0
    predictions = json.loads((workdir / "eval" / "test" / "predictions.json").read_text())
    assert len(predictions) == 2
    # decode.meteor=false, kept in the workdir's config.yaml: evaluate leaves METEOR out
    metrics = json.loads((workdir / "eval" / "test" / "metrics.json").read_text())
    assert "meteor" not in metrics and {"bleu_4", "rouge_l", "cider"} <= set(metrics)
    if java_available():
        assert metrics["method"].endswith("PTB tokenizer (Java), METEOR left out (decode.meteor)")
    out = root / "new.jsonl"
    assert (
        main(["caption", "--workdir", str(workdir), str(root / "photos"), "--out", str(out)]) == 0
    )
    assert len(out.read_text().splitlines()) == 12
    capsys.readouterr()
