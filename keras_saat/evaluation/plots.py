"""The paper's Figure 2 layout: the image, then one panel per word with its attention map."""

import numpy as np
import tensorflow as tf

from keras_saat.evaluation.attention_maps import upsample_attention


def plot_attention(image, words, attention, path=None, columns=6, smooth=True):
    """Draws a caption's attention, word by word, with matplotlib.

    Args:
        image: (H, W, 3) pixels in [0, 255] (the model's input, or the original image).
        words: list of str. The caption's words; "<end>" is appended for its own step.
        attention: (T, grid_h, grid_w). Step t produced word t.
        path: str or Path or None. Where to save the figure (PNG, PDF, ...). Defaults to None.
        columns: int. Panels per row. Defaults to 6.
        smooth: bool. Bilinear upsampling (as the paper's figures); False shows the cells.
            Defaults to True.

    Returns:
        matplotlib.figure.Figure. With a `path` the figure is drawn off-screen, apart
        from pyplot, so the caller's backend (a notebook's inline one) is left as it is.
    """
    image = np.asarray(image, np.float32)
    attention = np.asarray(attention, np.float32)
    labels = list(words)[: len(attention)]
    labels += ["<end>"] * (len(attention) - len(labels))
    panels = 1 + len(labels)
    rows = -(-panels // columns)
    size = (2.2 * columns, 2.4 * rows)
    if path is None:  # pyplot shows it (a notebook displays it inline)
        import matplotlib.pyplot as plt

        figure = plt.figure(figsize=size)
    else:  # a figure pyplot never sees: no backend is chosen or changed
        from matplotlib.figure import Figure

        figure = Figure(figsize=size)
    axes = figure.subplots(rows, columns, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    height, width = image.shape[:2]
    shown = np.clip(image, 0, 255).astype(np.uint8)
    axes.flat[0].imshow(shown)
    axes.flat[0].set_title("input", fontsize=10)
    for i, (word, alpha) in enumerate(zip(labels, attention, strict=True), start=1):
        ax = axes.flat[i]
        ax.imshow(shown)
        if smooth:
            heat = upsample_attention(alpha, (height, width))
        else:  # each cell one flat block
            heat = tf.image.resize(alpha[..., None], (height, width), method="nearest")
            heat = heat.numpy()[..., 0] / max(float(alpha.max()), 1e-12)
        ax.imshow(heat, cmap="gray", alpha=0.6, extent=(0, width, height, 0), vmin=0, vmax=1)
        ax.set_title(word, fontsize=11)
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=100)
    return figure
