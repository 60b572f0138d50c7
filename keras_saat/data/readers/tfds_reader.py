"""Reader for TensorFlow Datasets' `coco_captions` (Karpathy splits, prepared with `tfds build`)."""

from keras_saat.data.readers.caption_dataset import ImageRecord, Skips, add_caption, finish
from keras_saat.errors import KerasSaatError

# Our split -> the TFDS splits it is made of (coco_captions carries Karpathy's splits).
DEFAULT_SPLITS = {"train": ("train", "restval"), "val": ("val",), "test": ("test",)}


def read_tfds(name="coco_captions", data_dir=None, splits=None, strict=False):
    """Reads captions from a prepared TFDS captioning dataset; images stream at extraction time.

    Args:
        name: str. TFDS dataset name. Defaults to "coco_captions".
        data_dir: str or None. TFDS data folder. Defaults to None (TFDS's default).
        splits: dict or None. Our split -> tuple of TFDS split names. Defaults to
            train = train + restval, val = val, test = test.
        strict: bool. Raise on the first empty caption. Defaults to False.

    Returns:
        A CaptionDataset whose `image_source(split)` yields (position, encoded image bytes).
    """
    import tensorflow as tf
    import tensorflow_datasets as tfds

    splits = splits or DEFAULT_SPLITS
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as err:  # unknown names raise DatasetNotFoundError and others
        raise KerasSaatError(f"TFDS has no dataset {name!r}: {err}") from None

    def stream(tfds_split):
        try:
            return builder.as_dataset(
                split=tfds_split, decoders={"image": tfds.decode.SkipDecoding()}
            )
        except Exception as err:  # missing data raises AssertionError, unknown splits ValueError
            raise KerasSaatError(
                f"TFDS dataset {name!r} split {tfds_split!r} is not available in "
                f"{data_dir or 'the default TFDS folder'}: {err}. Prepare it where there is internet "
                f"(`tfds build {name}`) and copy the folder here"
            ) from None

    skips = Skips(strict)
    records = []
    for split, tfds_splits in splits.items():
        position = 0
        for tfds_split in tfds_splits:
            texts = stream(tfds_split).map(lambda ex: (ex["image/id"], ex["captions"]["text"]))
            for image_id, captions in texts.as_numpy_iterator():
                record = ImageRecord(int(image_id), None, split, [], stream_position=position)
                for k, caption in enumerate(captions):
                    where = f"tfds {name}/{tfds_split} image {int(image_id)} caption {k}"
                    try:
                        text = caption.decode("utf-8")
                    except UnicodeDecodeError:
                        skips.add("caption that is not UTF-8", where)
                        continue
                    add_caption(record.captions, text, where, skips)
                records.append(record)
                position += 1

    def image_source(split):
        """(position, encoded bytes) in stream order for one of our splits."""
        datasets = [stream(s).map(lambda ex: ex["image"]) for s in splits[split]]
        images = datasets[0]
        for more in datasets[1:]:
            images = images.concatenate(more)
        return images.enumerate().map(lambda i, image: (tf.cast(i, tf.int32), image))

    return finish(name, records, skips, f"tfds {name}", image_source)
