"""Flickr8k, COCO and TFDS readers on fixtures written in the exact upstream formats."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_saat.data import read_coco, read_flickr8k, read_tfds
from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import decode_image
from tests.helpers import coco_captions_examples


def flickr8k_files(tmp_path, extra=b""):
    token = (
        b"1000268201_693b08cb0e.jpg#0\tA child in a pink dress is climbing up a set of stairs in an entry way .\n"
        b"1000268201_693b08cb0e.jpg#1\tA girl going into a wooden building .\n"
        b"1001773457_577c3a7d70.jpg#0\tA black dog and a spotted dog are fighting\n"
        b"1001773457_577c3a7d70.jpg#1\t . \n"
        b"1002674143_1b742ab4b8.jpg#0\tA little girl covered in paint sits in front of a painted rainbow .\n"
        b"1003163366_44323f5815.jpg#0\tA man lays on a bench while his dog sits by him .\n"
    ) + extra
    (tmp_path / "Flickr8k.token.txt").write_bytes(token)
    (tmp_path / "Flickr_8k.trainImages.txt").write_text(
        "1000268201_693b08cb0e.jpg\n1001773457_577c3a7d70.jpg\n"
    )
    (tmp_path / "Flickr_8k.devImages.txt").write_text("1002674143_1b742ab4b8.jpg\n")
    (tmp_path / "Flickr_8k.testImages.txt").write_text("1003163366_44323f5815.jpg\n")
    return tmp_path / "Flickr8k.token.txt"


def test_flickr8k_reads_splits_and_counts_bad_lines(tmp_path):
    token_file = flickr8k_files(tmp_path, extra=b"1003163366_44323f5815.jpg#1\tA caf\xe9 bench\n")
    dataset = read_flickr8k(token_file)
    assert dataset.counts() == {"train": 2, "val": 1, "test": 1}
    first = dataset.split("train")[0]
    assert first.path == tmp_path / "Flicker8k_Dataset" / "1000268201_693b08cb0e.jpg"
    assert first.references[1] == "a girl going into a wooden building".split()
    assert len(dataset.split("train")[1].captions) == 1  # " . " is empty after tokenisation
    assert dataset.skips.summary() == [
        f"skipped 1 x empty caption (first: {token_file}:4)",
        f"skipped 1 x line that is not UTF-8 (first: {token_file}:7)",
    ]


def test_flickr8k_strict_and_malformed(tmp_path):
    token_file = flickr8k_files(tmp_path)
    with pytest.raises(KerasSaatError, match=r"Flickr8k.token.txt:4: empty caption \(strict mode"):
        read_flickr8k(token_file, strict=True)
    token_file.write_text("1000268201_693b08cb0e.jpg A child\n")
    with pytest.raises(
        KerasSaatError, match=r"Flickr8k.token.txt:1: expected 'name.jpg#k<TAB>caption'"
    ):
        read_flickr8k(token_file)
    (tmp_path / "Flickr_8k.devImages.txt").unlink()
    with pytest.raises(KerasSaatError, match="Flickr8k val list not found"):
        read_flickr8k(token_file)


def coco_file(path, ids, captions):
    content = {
        "info": {},
        "licenses": [],
        "images": [
            {
                "id": i,
                "file_name": f"COCO_{path.stem.split('_')[-1]}_{i:012d}.jpg",
                "height": 480,
                "width": 640,
            }
            for i in ids
        ],
        "annotations": [
            {"id": n, "image_id": i, "caption": c} for n, (i, c) in enumerate(captions)
        ],
    }
    path.write_text(json.dumps(content))
    return path


def test_coco_splits_val_into_val_test_and_restval(tmp_path):
    annotations = tmp_path / "annotations"
    annotations.mkdir()
    train = coco_file(
        annotations / "captions_train2014.json", [9, 3], [(9, "A cat."), (3, "Dogs run"), (3, "")]
    )
    val = coco_file(
        annotations / "captions_val2014.json",
        [40, 10, 20, 30],
        [(10, "A"), (20, "B b"), (30, "C"), (40, "D"), (77, "orphan")],
    )
    dataset = read_coco(train, val, val_images=1, test_images=2)
    by_id = {r.imgid: r for r in dataset.records}
    assert {i: r.split for i, r in by_id.items()} == {
        9: "train",
        3: "train",
        10: "val",
        20: "test",
        30: "test",
        40: "train",
    }
    assert by_id[10].path == tmp_path / "val2014" / "COCO_val2014_000000000010.jpg"
    assert by_id[3].references == [["dogs", "run"]]
    assert sorted(line.split(" (first")[0] for line in dataset.skips.summary()) == [
        "skipped 1 x caption of an unknown image",
        "skipped 1 x empty caption",
    ]


def test_coco_malformed(tmp_path):
    bad = tmp_path / "captions_train2014.json"
    bad.write_text(json.dumps({"images": []}))
    with pytest.raises(KerasSaatError, match="expected an object with an 'annotations' list"):
        read_coco(bad, bad)
    bad.write_text(json.dumps({"images": [{"id": 1}], "annotations": []}))
    with pytest.raises(KerasSaatError, match=r"images\[0\] needs 'id' and 'file_name'"):
        read_coco(bad, bad)


def test_tfds_coco_captions_with_mock_data(tmp_path):
    with tfds.testing.mock_data(as_dataset_fn=coco_captions_examples):
        dataset = read_tfds("coco_captions", data_dir=str(tmp_path))
        assert dataset.counts() == {"train": 6, "val": 3, "test": 3}  # train + restval
        train = dataset.split("train")
        assert [r.imgid for r in train] == [0, 1, 2, 100, 101, 102]
        assert [r.stream_position for r in train] == list(range(6))
        assert train[0].references[0] == ["a", "train", "picture", "number", "0"]
        assert len(train[1].captions) == 4
        assert dataset.skips.summary()[0].startswith("skipped 4 x empty caption")
        positions, images = zip(*dataset.image_source("val").as_numpy_iterator(), strict=True)
        assert positions == (0, 1, 2)
        pixels = decode_image(tf.constant(images[0]), 32)
        assert pixels.shape == (32, 32, 3) and np.isfinite(pixels.numpy()).all()


def test_tfds_unknown_dataset():
    with pytest.raises(KerasSaatError, match="TFDS has no dataset 'no_such_captions'"):
        read_tfds("no_such_captions")
