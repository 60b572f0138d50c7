"""Datasets: readers (Karpathy, Flickr8k, COCO, TFDS), the Shapes world, the feature cache, tf.data."""

from keras_saat.data.coco import read_coco
from keras_saat.data.dataset import CaptionDataset, ImageRecord, Skips
from keras_saat.data.flickr8k import read_flickr8k
from keras_saat.data.images import decode_image, load_image, load_images, resize_image
from keras_saat.data.karpathy import read_karpathy
from keras_saat.data.shapes import write_shapes_dataset
from keras_saat.data.tfds_reader import read_tfds

__all__ = [
    "CaptionDataset",
    "ImageRecord",
    "Skips",
    "decode_image",
    "load_image",
    "load_images",
    "read_coco",
    "read_flickr8k",
    "read_karpathy",
    "read_tfds",
    "resize_image",
    "write_shapes_dataset",
]
