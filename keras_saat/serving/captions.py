"""Signature outputs (arrays, batch first) -> one caption dict per image."""

from pathlib import Path

import numpy as np


def read_images(images):
    """Encoded image bytes from a list of paths and/or bytes (files are read, never decoded)."""
    if isinstance(images, (str, Path, bytes)):
        images = [images]
    out = []
    for image in images:
        if isinstance(image, (bytes, bytearray)):
            out.append(bytes(image))
        else:
            out.append(Path(image).read_bytes())
    return out


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def captions_from_outputs(outputs):
    """Per-image dicts from the model's outputs.

    Args:
        outputs: dict of array-likes with the batch first: caption, tokens, log_prob,
            attention (B, T, grid_h, grid_w), valid, error.

    Returns:
        list of dict: caption (str), tokens (list of str, `<end>` included when generated),
        log_prob (float), attention (n_tokens, grid_h, grid_w) float32 array (the map
        each token was generated with), valid (bool), error (str, "" when valid).
    """
    tokens = np.asarray(outputs["tokens"], dtype=object)
    attention = np.asarray(outputs["attention"], dtype=np.float32)
    results = []
    for i in range(len(outputs["caption"])):
        row = [_text(t) for t in tokens[i]]
        n = sum(1 for t in row if t)
        results.append(
            {
                "caption": _text(outputs["caption"][i]),
                "tokens": row[:n],
                "log_prob": float(outputs["log_prob"][i]),
                "attention": attention[i, :n],
                "valid": bool(outputs["valid"][i]),
                "error": _text(outputs["error"][i]),
            }
        )
    return results
