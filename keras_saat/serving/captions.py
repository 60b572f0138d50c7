"""The clients' two ends: image files read as encoded bytes, and signature outputs (arrays,
batch first) turned into one caption dict per image."""

import errno
import os
from pathlib import Path

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.images.image_files import MAX_FILE_BYTES, read_image_file


def read_images(images):
    """Encoded image bytes from a list of paths and/or bytes (files are read, never
    decoded, through `read_image_file`); OSError for a file that cannot be opened,
    KerasSaatError for one that is not a regular file or is over MAX_FILE_BYTES."""
    if isinstance(images, (str, Path, bytes)):
        images = [images]
    out = []
    for image in images:
        if isinstance(image, (bytes, bytearray)):
            out.append(bytes(image))
            continue
        try:
            out.append(read_image_file(image, MAX_FILE_BYTES))
        except IsADirectoryError:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(image)) from None
        except ValueError as err:
            raise KerasSaatError(f"cannot read image {image}: {err}") from None
    return out


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def captions_from_outputs(outputs):
    """Per-image dicts from the model's outputs.

    Args:
        outputs: dict of array-likes with the batch first: caption, tokens, log_prob,
            attention (B, T, grid_h, grid_w), novelty, familiar (both optional), valid,
            error.

    Returns:
        list of dict: caption (str), tokens (list of str, `<end>` included when generated),
        log_prob (float), attention (n_tokens, grid_h, grid_w) float32 array, novelty
        (float, NaN when not measured), familiar (bool), valid (bool), error (str).
    """
    batch = len(outputs["caption"])
    tokens = np.asarray(outputs["tokens"], dtype=object)
    attention = np.asarray(outputs["attention"], dtype=np.float32)
    # A model never calibrated has no novelty outputs, or JSON nulls: NaN, and familiar.
    novelty = outputs.get("novelty", [None] * batch)
    familiar = outputs.get("familiar", [True] * batch)
    results = []
    for i in range(batch):
        row = [_text(t) for t in tokens[i]]
        n = sum(1 for t in row if t)
        results.append(
            {
                "caption": _text(outputs["caption"][i]),
                "tokens": row[:n],
                "log_prob": float(outputs["log_prob"][i]),
                "attention": attention[i, :n],
                "novelty": float("nan") if novelty[i] is None else float(novelty[i]),
                "familiar": bool(familiar[i]),
                "valid": bool(outputs["valid"][i]),
                "error": _text(outputs["error"][i]),
            }
        )
    return results
