"""Reader for COCO's captions_train2014.json / captions_val2014.json."""

from pathlib import Path

from keras_saat.data.readers.caption_dataset import (
    ImageRecord,
    Skips,
    add_caption,
    check_file,
    finish,
)
from keras_saat.data.readers.karpathy import is_int, read_json
from keras_saat.errors import KerasSaatError


def _read_annotations(path, skips):
    path = check_file(path, "COCO annotation file")
    content = read_json(path, "COCO annotation file")
    for key in ("images", "annotations"):
        if not isinstance(content, dict) or not isinstance(content.get(key), list):
            raise KerasSaatError(
                f"COCO annotation file {path}: expected an object with an '{key}' list"
            )
    images = {}
    for i, image in enumerate(content["images"]):
        if not isinstance(image, dict) or "id" not in image or "file_name" not in image:
            raise KerasSaatError(f"{path}: images[{i}] needs 'id' and 'file_name'")
        if not is_int(image["id"]) or not isinstance(image["file_name"], str):
            raise KerasSaatError(
                f"{path}: images[{i}] needs an integer 'id' and a string 'file_name'; got "
                f"{image['id']!r:.40} and {image['file_name']!r:.60}"
            )
        images[image["id"]] = (image["file_name"], [])
    for i, annotation in enumerate(content["annotations"]):
        where = f"{path}: annotations[{i}]"
        if not isinstance(annotation, dict) or not {"image_id", "caption"} <= annotation.keys():
            raise KerasSaatError(f"{where} needs 'image_id' and 'caption'")
        if not is_int(annotation["image_id"]):
            raise KerasSaatError(
                f"{where}.image_id must be an integer; got {annotation['image_id']!r:.40}"
            )
        if annotation["image_id"] not in images:
            skips.add("caption of an unknown image", f"{where} (image_id {annotation['image_id']})")
            continue
        add_caption(images[annotation["image_id"]][1], annotation["caption"], where, skips)
    # captions_val2014.json -> the images live in val2014/.
    folder = path.stem.split("_", 1)[-1]
    return path, folder, images


def read_coco(
    train_file, val_file, images_dir=None, val_images=5000, test_images=5000, strict=False
):
    """Reads COCO caption annotations into train/val/test.

    The train file's images train. The val file's images, by increasing id, give
    `val_images` validation and `test_images` test images; the rest train (Karpathy's
    "restval").

    Args:
        train_file: str or Path. captions_train2014.json (or 2017).
        val_file: str or Path. captions_val2014.json (or 2017).
        images_dir: str, Path or None. Folder holding train2014/ and val2014/.
            Defaults to None (the annotation folder's parent, COCO's own layout).
        val_images: int. Defaults to 5000.
        test_images: int. Defaults to 5000.
        strict: bool. Raise on the first empty or orphan caption. Defaults to False.
    """
    skips = Skips(strict)
    records = []
    for role, file in (("train", train_file), ("val", val_file)):
        path, folder, images = _read_annotations(file, skips)
        root = Path(images_dir) if images_dir else path.parent.parent
        for position, image_id in enumerate(sorted(images)):
            if role == "train" or position >= val_images + test_images:
                split = "train"
            else:
                split = "val" if position < val_images else "test"
            name, captions = images[image_id]
            records.append(ImageRecord(int(image_id), root / folder / name, split, captions))
    return finish("coco", records, skips, f"{train_file} + {val_file}")
