"""Reader for Karpathy's split files (dataset_flickr8k.json, dataset_flickr30k.json,
dataset_coco.json), the format the Shapes generator writes too, with each image's
`objects` (ground-truth boxes)."""

import json
from pathlib import Path

from keras_saat.data.readers.caption_dataset import (
    SPLITS,
    ImageRecord,
    Skips,
    add_caption,
    check_file,
    finish,
)
from keras_saat.errors import KerasSaatError


def read_json(path, what):
    """Parses a JSON file; errors name the file, the line and the column."""
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark read past
    except json.JSONDecodeError as err:
        why = f"is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
    except UnicodeDecodeError as err:
        why = f"is not UTF-8 text (byte {err.start}): {err.reason}"
    except ValueError as err:  # an integer of over 4300 digits, which int() refuses
        raise KerasSaatError(
            f"{what} {path} holds a value that cannot be read: {err}"[:300]
        ) from None
    except RecursionError:
        why = "is nested too deeply to be a dataset file"
    raise KerasSaatError(f"{what} {path} {why}")


def is_int(value):
    """Whether a JSON value is an integer (true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def read_karpathy(path, images_dir=None, restval_to_train=True, strict=False):
    """Reads a Karpathy split JSON file.

    Each sentence's `tokens` are the caption (joined by spaces); `raw` is used
    only where `tokens` is missing.

    Args:
        path: str or Path. The JSON file.
        images_dir: str, Path or None. Folder that `filepath/filename` are relative to.
            Defaults to None (the JSON file's folder).
        restval_to_train: bool. Fold COCO's "restval" split into "train". Defaults to True.
        strict: bool. Raise on the first empty caption instead of skipping it. Defaults to False.

    Returns:
        A CaptionDataset.
    """
    path = check_file(
        path,
        "dataset file",
        ". For the Shapes world run `keras-saat make-shapes --out DIR`; "
        "for real data point data.path at a Karpathy split JSON",
    )
    content = read_json(path, "dataset file")
    if not isinstance(content, dict) or not isinstance(content.get("images"), list):
        raise KerasSaatError(
            f"dataset file {path}: expected an object with an 'images' list (Karpathy split format)"
        )
    root = Path(images_dir) if images_dir else path.parent
    skips = Skips(strict)
    records = []
    for index, image in enumerate(content["images"]):
        where = f"{path}: images[{index}]"
        if not isinstance(image, dict):
            raise KerasSaatError(f"{where} must be an object")
        for key in ("filename", "split", "sentences"):
            if key not in image:
                raise KerasSaatError(f"{where} has no '{key}' field")
        for key in ("filename", "filepath", "split"):
            if key in image and not isinstance(image[key], str):
                raise KerasSaatError(f"{where}.{key} must be a string; got {image[key]!r:.60}")
        if "imgid" in image and not is_int(image["imgid"]):
            raise KerasSaatError(f"{where}.imgid must be an integer; got {image['imgid']!r:.60}")
        split = image["split"]
        if split == "restval":
            if not restval_to_train:
                continue
            split = "train"
        if split not in SPLITS:
            raise KerasSaatError(
                f"{where}.split is {split!r}; expected one of train, val, test, restval"
            )
        if not isinstance(image["sentences"], list):
            raise KerasSaatError(f"{where}.sentences must be a list")
        captions = []
        for k, sentence in enumerate(image["sentences"]):
            sentence_where = f"{where}.sentences[{k}]"
            if not isinstance(sentence, dict):
                raise KerasSaatError(f"{sentence_where} must be an object")
            tokens = sentence.get("tokens")
            if tokens is None:
                if not isinstance(sentence.get("raw"), str):
                    raise KerasSaatError(
                        f"{sentence_where} has neither 'tokens' (a list of words) nor 'raw' (a string)"
                    )
                text = sentence["raw"]
            elif isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
                text = " ".join(tokens)
            else:
                raise KerasSaatError(f"{sentence_where}.tokens must be a list of strings")
            add_caption(captions, text, sentence_where, skips)
        records.append(
            ImageRecord(
                imgid=image.get("imgid", index),
                path=root / image.get("filepath", "") / image["filename"],
                split=split,
                captions=captions,
                objects=image.get("objects"),
            )
        )
    return finish(str(content.get("dataset", path.stem)), records, skips, str(path))
