"""Attention maps as pictures: upsample a (grid_h, grid_w) map and lay it over the image."""

import numpy as np
import tensorflow as tf


def upsample_attention(alpha, size):
    """(grid_h, grid_w) attention -> (H, W) map (`size`: int or (H, W)), bilinear, scaled to
    a maximum of 1."""
    alpha = np.asarray(alpha, np.float32)
    size = (size, size) if np.isscalar(size) else tuple(size)
    resized = tf.image.resize(alpha[..., None], size, method="bilinear").numpy()[..., 0]
    return resized / max(float(resized.max()), 1e-12)


def overlay(image, alpha, size=96):
    """An image (H, W, 3) in [0, 255] dimmed where attention is low: (size, size, 3) uint8."""
    pixels = tf.image.resize(np.asarray(image, np.float32), (size, size)).numpy()
    weight = upsample_attention(alpha, size)[..., None]
    return np.clip(pixels * (0.25 + 0.75 * weight), 0, 255).astype(np.uint8)


def attention_strip(image, alphas, size=96):
    """The image (H, W, 3) in [0, 255], then one panel per map of `alphas` (T, grid_h,
    grid_w) laid over it: (size, size * (T + 1), 3) uint8."""
    first = tf.image.resize(np.asarray(image, np.float32), (size, size)).numpy()
    panels = [np.clip(first, 0, 255).astype(np.uint8)]
    panels += [overlay(image, alpha, size) for alpha in alphas]
    return np.concatenate(panels, axis=1)
