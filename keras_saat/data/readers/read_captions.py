"""read_captions: any caption file the readers know, by looking at it once."""

import re

from keras_saat.data.readers.caption_dataset import check_file
from keras_saat.errors import KerasSaatError

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl")
SNIFF_BYTES = 64 * 1024  # enough for a JSON file's first record, never the whole file
FLICKR8K_LINE = re.compile(rb"^[^\t#\r\n]+#\d+\t")  # name.jpg#k<TAB>caption


def _head(path):
    with path.open("rb") as handle:
        return handle.read(SNIFF_BYTES)


def _json_kind(path):
    """ "karpathy" or "coco", from the keys near the start of a JSON caption file."""
    head = _head(path)
    if b'"sentences"' in head:
        return "karpathy"
    if any(key in head for key in (b'"annotations"', b'"info"', b'"licenses"')):
        return "coco"
    if b'"images"' in head:  # a Karpathy file whose first image record is long
        return "karpathy"
    raise KerasSaatError(
        f"{path} is neither a Karpathy split file (images with sentences) nor COCO caption "
        "annotations (images and annotations); see keras_saat.data.read_captions for the formats"
    )


def _coco_val_file(path, val_path):
    if val_path is not None:
        return val_path
    sibling = path.with_name(path.name.replace("train", "val"))
    if sibling != path and sibling.is_file():
        return sibling
    raise KerasSaatError(
        f"{path} holds COCO caption annotations: give the val file too, "
        "read_captions(train_file, val_path='captions_val2014.json')"
    )


def read_captions(path, images_dir=None, strict=False, val_path=None):
    """Reads a caption file in any format the library knows, into train/val/test records.

    The format is told from the file: your own table (`.csv`, `.tsv`, `.jsonl`, or `.txt`
    with a header; `keras_saat.data.readers.caption_table`), Flickr8k's `Flickr8k.token.txt`
    with its split lists beside it, a Karpathy split file, or COCO caption annotations
    (with `val_path`, or the val file beside it).

    Args:
        path: str or Path. The caption file.
        images_dir: str, Path or None. The folder image paths are relative to. Defaults
            to None (each format's own default: a table's or Karpathy file's folder).
        strict: bool. Raise on the first bad row or missing image instead of skipping
            and counting it (`dataset.skips`). Defaults to False.
        val_path: str, Path or None. COCO only: the val annotations. Defaults to None.

    Returns:
        A `CaptionDataset`: `.train`, `.val` and `.test` are lists of `ImageRecord`
        that `Captioner.fit`, `Captioner.from_records` and `CaptionMetrics` take.

    Example:
        ```python
        data = keras_saat.data.read_captions("captions.csv")
        model = keras_saat.Captioner.from_records(data.train, backbone_weights="imagenet")
        ```
    """
    path = check_file(path, "caption file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        if _json_kind(path) == "coco":
            from keras_saat.data.readers.coco import read_coco

            return read_coco(path, _coco_val_file(path, val_path), images_dir, strict=strict)
        from keras_saat.data.readers.karpathy import read_karpathy

        return read_karpathy(path, images_dir, strict=strict)
    if suffix == ".txt" and FLICKR8K_LINE.match(_head(path)):
        from keras_saat.data.readers.flickr8k import read_flickr8k

        return read_flickr8k(path, images_dir, strict=strict)
    if suffix in (*TABLE_SUFFIXES, ".txt"):
        from keras_saat.data.readers.caption_table import read_caption_table

        return read_caption_table(path, images_dir, strict=strict)
    raise KerasSaatError(
        f"{path}: unknown caption file type {suffix or '(no suffix)'}; give a .csv, .tsv, "
        ".jsonl or .txt table, a Flickr8k token file, or a Karpathy or COCO .json file"
    )
