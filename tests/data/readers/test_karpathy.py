import json

import pytest

from keras_saat.data import read_karpathy
from keras_saat.errors import KerasSaatError


def write(tmp_path, content):
    path = tmp_path / "dataset.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_reads_tokens_raw_filepath_and_folds_restval(tmp_path):
    path = write(
        tmp_path,
        {
            "dataset": "coco",
            "images": [
                {
                    "filepath": "val2014",
                    "filename": "x.jpg",
                    "imgid": 4,
                    "split": "restval",
                    "sentences": [{"tokens": ["A", "dog"], "raw": "A dog."}],
                },
                {"filename": "y.jpg", "split": "test", "sentences": [{"raw": "Two Cats"}]},
            ],
        },
    )
    dataset = read_karpathy(path, images_dir=tmp_path / "root")
    assert dataset.name == "coco"
    first, second = dataset.records
    assert (
        first.split == "train"
        and first.imgid == 4
        and first.captions == ["A dog"]
        and first.references == [["a", "dog"]]
    )
    assert first.path == tmp_path / "root" / "val2014" / "x.jpg"
    assert second.references == [["two", "cats"]] and second.imgid == 1
    assert len(read_karpathy(path, restval_to_train=False).records) == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"images": [', "not valid JSON: .* line 1, column"),
        ('{"imgs": []}', "expected an object with an 'images' list"),
        (
            {"images": [{"filename": "a.jpg", "split": "train"}]},
            r"images\[0\] has no 'sentences' field",
        ),
        (
            {"images": [{"filename": "a.jpg", "split": "dev", "sentences": [{"raw": "x"}]}]},
            "split is 'dev'",
        ),
        (
            {"images": [{"filename": "a.jpg", "split": "train", "sentences": [{"x": 1}]}]},
            r"sentences\[0\] has neither 'tokens'",
        ),
    ],
)
def test_malformed_files_name_the_problem(tmp_path, content, message):
    with pytest.raises(KerasSaatError, match=message):
        read_karpathy(write(tmp_path, content))


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(KerasSaatError, match="dataset file not found.*make-shapes"):
        read_karpathy(tmp_path / "nope.json")
