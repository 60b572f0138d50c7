"""Datasets: the Shapes world, Karpathy split files, image loading."""

from keras_saat.data.images import load_image, load_images
from keras_saat.data.karpathy import CaptionDataset, ImageRecord, read_karpathy
from keras_saat.data.shapes import write_shapes_dataset

__all__ = [
    "CaptionDataset",
    "ImageRecord",
    "load_image",
    "load_images",
    "read_karpathy",
    "write_shapes_dataset",
]
