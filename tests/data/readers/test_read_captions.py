"""read_captions tells each format from the file and gives what its own reader gives."""

import json

import pytest

from keras_saat.data import (
    read_caption_table,
    read_captions,
    read_coco,
    read_flickr8k,
    read_karpathy,
)
from keras_saat.errors import KerasSaatError


def same(a, b):
    assert a.name == b.name
    assert [(r.path, r.split, r.captions) for r in a.records] == [
        (r.path, r.split, r.captions) for r in b.records
    ]


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".txt", ".jsonl"])
def test_tables(tmp_path, suffix):
    (tmp_path / "dog.jpg").write_bytes(b"x")
    path = tmp_path / f"captions{suffix}"
    if suffix == ".jsonl":
        path.write_text(json.dumps({"image": "dog.jpg", "caption": "A dog.", "split": "val"}))
    else:
        sep = "," if suffix == ".csv" else "\t"
        path.write_text(f"image{sep}caption{sep}split\ndog.jpg{sep}A dog runs.{sep}val\n")
    data = read_captions(path)
    same(data, read_caption_table(path))
    assert [r.captions for r in data.val] == [[data.val[0].captions[0]]] and not data.train


def test_flickr8k_token_file(tmp_path):
    token = tmp_path / "Flickr8k.token.txt"
    token.write_text("a.jpg#0\tA dog runs .\na.jpg#1\tA brown dog .\nb.jpg#0\tA cat .\n")
    (tmp_path / "Flickr_8k.trainImages.txt").write_text("a.jpg\n")
    (tmp_path / "Flickr_8k.devImages.txt").write_text("b.jpg\n")
    (tmp_path / "Flickr_8k.testImages.txt").write_text("")
    data = read_captions(token)
    same(data, read_flickr8k(token))
    assert len(data.train[0].captions) == 2 and data.val[0].path.name == "b.jpg"


def test_karpathy_file(shapes_dir):
    path = shapes_dir / "dataset_shapes.json"
    data = read_captions(path)
    same(data, read_karpathy(path))
    assert len(data.train) == 40 and len(data.val) == 8 and len(data.test) == 8


def coco_file(path, image_id):
    path.write_text(
        json.dumps(
            {
                "info": {},
                "images": [{"id": image_id, "file_name": f"{image_id}.jpg"}],
                "annotations": [{"image_id": image_id, "caption": "A plate of food."}],
            }
        )
    )
    return path


def test_coco_annotations_with_the_val_file_beside(tmp_path):
    train = coco_file(tmp_path / "captions_train2014.json", 1)
    val = coco_file(tmp_path / "captions_val2014.json", 2)
    same(read_captions(train), read_coco(train, val))
    (tmp_path / "other").mkdir()
    alone = coco_file(tmp_path / "other" / "captions_train2014.json", 1)
    with pytest.raises(KerasSaatError, match=r"COCO caption annotations: give the val file"):
        read_captions(alone)
    same(read_captions(alone, val_path=val), read_coco(alone, val))


def test_unknown_files_are_named(tmp_path):
    with pytest.raises(KerasSaatError, match=r"caption file not found: .*nowhere.csv"):
        read_captions(tmp_path / "nowhere.csv")
    (tmp_path / "c.xml").write_text("<x/>")
    with pytest.raises(KerasSaatError, match=r"unknown caption file type .xml"):
        read_captions(tmp_path / "c.xml")
    (tmp_path / "c.json").write_text('{"rows": []}')
    with pytest.raises(KerasSaatError, match=r"neither a Karpathy split file .* nor COCO"):
        read_captions(tmp_path / "c.json")


def test_a_csv_saved_as_txt_and_a_karpathy_file_with_a_byte_order_mark(tmp_path, shapes_dir):
    (tmp_path / "dog.jpg").write_bytes(b"x")
    (tmp_path / "captions.txt").write_text("image,caption\ndog.jpg,A dog runs.\n")
    assert [r.captions for r in read_captions(tmp_path / "captions.txt").records] == [
        ["A dog runs."]
    ]
    marked = tmp_path / "dataset_marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + (shapes_dir / "dataset_shapes.json").read_bytes())
    same(
        read_captions(marked, images_dir=shapes_dir / "images"),
        read_karpathy(marked, shapes_dir / "images"),
    )
    assert len(read_captions(marked, images_dir=shapes_dir / "images").train) == 40
