"""Reader for Karpathy's split files (dataset_flickr8k.json, dataset_coco.json, ...).

The same format is written by the Shapes generator, with an extra `objects`
field per image (ground-truth boxes).
"""

import dataclasses
import json
from pathlib import Path

from keras_saat.errors import KerasSaatError

SPLITS = ("train", "val", "test")


@dataclasses.dataclass
class ImageRecord:
    """One image and its reference captions.

    Args:
        imgid: int. The image's id in the dataset file.
        path: Path. The image file.
        split: str. "train", "val" or "test" ("restval" is folded into train by default).
        captions: list of list of str. Tokenised reference captions.
        objects: list of dict or None. Shapes world ground truth (shape, colour, size, cell, box).
    """

    imgid: int
    path: Path
    split: str
    captions: list
    objects: list | None = None


@dataclasses.dataclass
class CaptionDataset:
    """All images of a dataset file, grouped by split."""

    name: str
    records: list

    def split(self, name):
        return [r for r in self.records if r.split == name]

    def counts(self):
        return {s: sum(r.split == s for r in self.records) for s in SPLITS}


def _tokens(sentence, where):
    tokens = sentence.get("tokens")
    if tokens is None:
        raw = sentence.get("raw")
        if not isinstance(raw, str):
            raise KerasSaatError(
                f"{where} has neither 'tokens' (a list of words) nor 'raw' (a string)"
            )
        tokens = raw.lower().split()
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise KerasSaatError(f"{where}.tokens must be a list of strings")
    return [t.lower() for t in tokens]


def read_karpathy(path, images_dir=None, restval_to_train=True):
    """Reads a Karpathy split JSON file.

    Args:
        path: str or Path. The JSON file.
        images_dir: str, Path or None. Folder that `filepath/filename` are relative to.
            Defaults to None (the JSON file's folder).
        restval_to_train: bool. Fold COCO's "restval" split into "train". Defaults to True.

    Returns:
        A CaptionDataset.
    """
    path = Path(path)
    if not path.is_file():
        raise KerasSaatError(
            f"dataset file not found: {path}. For the Shapes world run "
            "`keras-saat make-shapes --out DIR`; for real data point data.path at a Karpathy split JSON"
        )
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise KerasSaatError(
            f"dataset file {path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from None
    except UnicodeDecodeError as err:
        raise KerasSaatError(f"dataset file {path} is not UTF-8 text: {err}") from None
    if not isinstance(content, dict) or not isinstance(content.get("images"), list):
        raise KerasSaatError(
            f"dataset file {path}: expected an object with an 'images' list (Karpathy split format)"
        )
    root = Path(images_dir) if images_dir else path.parent
    records = []
    for index, image in enumerate(content["images"]):
        where = f"{path}: images[{index}]"
        if not isinstance(image, dict):
            raise KerasSaatError(f"{where} must be an object")
        for key in ("filename", "split", "sentences"):
            if key not in image:
                raise KerasSaatError(f"{where} has no '{key}' field")
        split = image["split"]
        if split == "restval":
            if not restval_to_train:
                continue
            split = "train"
        if split not in SPLITS:
            raise KerasSaatError(
                f"{where}.split is {split!r}; expected one of train, val, test, restval"
            )
        sentences = image["sentences"]
        if not isinstance(sentences, list) or not sentences:
            raise KerasSaatError(f"{where}.sentences must be a non-empty list")
        captions = [_tokens(s, f"{where}.sentences[{k}]") for k, s in enumerate(sentences)]
        records.append(
            ImageRecord(
                imgid=int(image.get("imgid", index)),
                path=root / image.get("filepath", "") / image["filename"],
                split=split,
                captions=captions,
                objects=image.get("objects"),
            )
        )
    if not records:
        raise KerasSaatError(f"dataset file {path} lists no images")
    return CaptionDataset(name=str(content.get("dataset", path.stem)), records=records)
