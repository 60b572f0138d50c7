"""The paper's Figure 2 layout: the image, then one panel per word with its attention map;
and `plot_captions`, a grid of images with their captions."""

import textwrap

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
    labels = _labels(words, attention)
    rows = -(-(1 + len(labels)) // columns)
    figure, axes = _figure(rows, columns, (2.2 * columns, 2.4 * rows), path)
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


def plot_captions(images, captions, references=None, titles=None, path=None, columns=4):
    """Draws images in a grid, each with its caption under it (and a reference below that).

    Args:
        images: list of (H, W, 3) pixels in [0, 255].
        captions: list of str. One per image: the model's caption.
        references: list of str or None. One per image, in grey under the caption.
        titles: list of str or None. One per image, above it (a file name, a score).
        path: str or Path or None. Where to save the figure; None: pyplot shows it.
        columns: int. Images per row. Defaults to 4.

    Returns:
        matplotlib.figure.Figure.
    """
    count = len(images)
    if len(captions) != count or (references is not None and len(references) != count):
        raise ValueError(
            f"plot_captions needs one caption (and reference) per image: {count} images, "
            f"{len(captions)} captions"
            + ("" if references is None else f", {len(references)} references")
        )
    columns = max(1, min(columns, count))
    rows = max(1, -(-count // columns))
    figure, axes = _figure(rows, columns, (3.0 * columns, 3.9 * rows), path)
    for i, (ax, image, caption) in enumerate(zip(axes.flat, images, captions, strict=False)):
        ax.imshow(np.clip(np.asarray(image, np.float32), 0, 255).astype(np.uint8))
        if titles is not None:
            ax.set_title(titles[i], fontsize=9)
        lines = textwrap.fill(caption or "(empty)", 30)
        ax.text(0.5, -0.03, lines, transform=ax.transAxes, ha="center", va="top", fontsize=10)
        if references is not None:
            below = -0.05 - 0.085 * (lines.count("\n") + 1)
            ax.text(
                0.5, below, textwrap.fill(references[i], 32), transform=ax.transAxes,
                ha="center", va="top", fontsize=8.5, color="0.45", style="italic",
            )  # fmt: skip
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=100)
    return figure


def _figure(rows, columns, size, path):
    """(figure, axes grid without axis lines): pyplot's when `path` is None (a notebook
    shows it inline), else one pyplot never sees, so no backend is chosen or changed."""
    if path is None:
        import matplotlib.pyplot as plt

        figure = plt.figure(figsize=size)
    else:
        from matplotlib.figure import Figure

        figure = Figure(figsize=size)
    axes = figure.subplots(rows, columns, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    return figure, axes


def _labels(words, attention):
    """The caption's words, one a step, "<end>" for the steps past them."""
    labels = list(words)[: len(attention)]
    return labels + ["<end>"] * (len(attention) - len(labels))


# The attention map's weight over the image in a panel, as plot_attention's overlay.
HEAT_WEIGHT = 0.6


class AttentionPlotter:
    """Saves Figure 2 layouts for many images, drawing each on one reused off-screen figure,
    so an image costs its drawing and its PNG, not a new figure's layout.

    Args:
        columns: int. Panels per row. Defaults to 6.
        smooth: bool. Bilinear upsampling (as the paper's figures); False shows the cells.
            Defaults to True.
        dpi: int. Defaults to 100.
    """

    def __init__(self, columns=6, smooth=True, dpi=100):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.columns, self.smooth, self.dpi = columns, smooth, dpi
        self.figure = Figure()
        FigureCanvasAgg(self.figure)
        self._rows = 0
        self._panels = []  # (image artist, title artist), row-major

    def _layout(self, panels):
        """Panels for `panels` images; the figure is cleared only when the rows change."""
        rows = -(-panels // self.columns)
        if rows == self._rows:
            return
        self.figure.clear()
        self.figure.set_size_inches(2.2 * self.columns, 2.4 * rows)
        self._rows, self._panels = rows, []
        width, height = 1 / self.columns, 1 / rows
        for i in range(rows * self.columns):
            row, column = divmod(i, self.columns)
            # Fixed boxes with room for the word above each: no layout pass per image.
            left, bottom = column * width + 0.005, 1 - (row + 1) * height + 0.01
            ax = self.figure.add_axes((left, bottom, width - 0.01, height * 0.82))
            ax.set_axis_off()
            image = ax.imshow(np.zeros((2, 2, 3), np.uint8), interpolation="antialiased")
            title = ax.text(0.5, 1.02, "", transform=ax.transAxes, ha="center", va="bottom")
            self._panels.append((image, title))

    def save(self, image, words, attention, path):
        """Draws one caption's attention (`image`, `words` and `attention` as
        `plot_attention` takes them) and writes it to `path` (PNG, PDF, ...)."""
        shown = np.clip(np.asarray(image, np.float32), 0, 255)
        attention = np.asarray(attention, np.float32)
        labels = _labels(words, attention)
        self._layout(1 + len(labels))
        height, width = shown.shape[:2]
        pictures = [("input", shown)]
        for word, alpha in zip(labels, attention, strict=True):
            heat = _heat(alpha, (height, width), self.smooth)[..., None]  # (H, W, 1) in [0, 1]
            pictures.append((word, (1 - HEAT_WEIGHT) * shown + HEAT_WEIGHT * 255 * heat))
        for i, (artist, title) in enumerate(self._panels):
            visible = i < len(pictures)
            artist.axes.set_visible(visible)
            if visible:
                label, pixels = pictures[i]
                artist.set_data(pixels.astype(np.uint8))
                artist.set_extent((-0.5, width - 0.5, height - 0.5, -0.5))
                title.set_text(label)
                title.set_fontsize(10 if i == 0 else 11)
        # A fast PNG compression: the figure's pixels, not its file size, are the point.
        png = str(path).lower().endswith(".png")
        options = {"pil_kwargs": {"compress_level": 1}} if png else {}
        self.figure.savefig(path, dpi=self.dpi, **options)


def _heat(alpha, size, smooth):
    """(grid_h, grid_w) attention -> (H, W) in [0, 1]: bilinear, or each cell one block."""
    if smooth:
        return upsample_attention(alpha, size)
    rows = (np.arange(size[0]) * alpha.shape[0]) // size[0]
    columns = (np.arange(size[1]) * alpha.shape[1]) // size[1]
    return alpha[rows][:, columns] / max(float(alpha.max()), 1e-12)
