"""Datasets: readers (your CSV/TSV/JSONL, Karpathy, Flickr8k, COCO, TFDS), the Shapes world,
the feature cache, tf.data.

    data = keras_saat.data.read_captions("captions.csv")  # any format, told from the file
    data.train, data.val, data.test                       # lists of ImageRecord

The names below load on first use, so the reader registry runs without TensorFlow.
Images are decoded by `keras_saat.images`.
"""

from keras_saat._lazy import lazy_getattr

_EXPORTS = {
    "CaptionDataset": "keras_saat.data.readers.caption_dataset",
    "ImageRecord": "keras_saat.data.readers.caption_dataset",
    "Skips": "keras_saat.data.readers.caption_dataset",
    "read_caption_table": "keras_saat.data.readers.caption_table",
    "read_captions": "keras_saat.data.readers.read_captions",
    "read_coco": "keras_saat.data.readers.coco",
    "read_flickr8k": "keras_saat.data.readers.flickr8k",
    "read_karpathy": "keras_saat.data.readers.karpathy",
    "read_tfds": "keras_saat.data.readers.tfds_reader",
    "write_shapes_dataset": "keras_saat.data.shapes_dataset",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("keras_saat.data", _EXPORTS, globals())


def __dir__():
    return __all__
