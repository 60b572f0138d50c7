"""Attention localisation and the attention plots, on hand-made scenes and maps."""

import numpy as np
import pytest

from keras_saat.evaluation.localisation import attention_localisation, object_phrases
from keras_saat.evaluation.plots import plot_attention

RED_CIRCLE = {"shape": "circle", "colour": "red", "size": "large", "box": [5, 5, 37, 37]}
BLUE_SQUARE = {"shape": "square", "colour": "blue", "size": "small", "box": [100, 100, 118, 118]}


def test_object_phrases_are_parsed_with_and_without_size():
    words = "a large red circle to the left of a blue square".split()
    assert object_phrases(words) == [
        (2, 3, {"colour": "red", "shape": "circle", "size": "large"}),
        (9, 10, {"colour": "blue", "shape": "square", "size": None}),
    ]
    assert object_phrases("there is a red".split()) == []


def one_hot_maps(cells, grid=(8, 8)):
    maps = np.zeros((len(cells), *grid), np.float32)
    for t, (r, c) in enumerate(cells):
        maps[t, r, c] = 1.0
    return maps


def test_hits_misses_and_chance():
    # 8x8 grid over 128 px: cell centres at 8, 24, ..., 120. The red circle's box [5, 37]
    # dilated by 8 px covers centres 8, 24 and 40 in x and y: 9 of 64 cells.
    words = "a red circle to the left of a blue square".split()
    #        a     red     circle   to      the     left    of      a       blue    square
    cells = [(0, 0), (1, 1), (7, 7), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (7, 7), (0, 0)]
    result = attention_localisation([words], [one_hot_maps(cells)], [[RED_CIRCLE, BLUE_SQUARE]])
    # red: hit (cell 1,1 centre 24,24); circle: miss (7,7); blue: hit; square: miss.
    assert result["words"] == 4 and result["hit_rate"] == pytest.approx(0.5)
    # The small square's box [100, 118] dilated to [92, 126] covers centres 104 and 120: 4 cells.
    expected_chance = (2 * 9 / 64 + 2 * 4 / 64) / 4
    assert result["chance"] == pytest.approx(expected_chance)
    assert result["phrases"] == 2 and result["unmatched"] == 0


def test_wrongly_named_objects_are_not_scored():
    words = "a green circle at the top left".split()  # there is no green circle
    maps = one_hot_maps([(0, 0)] * len(words))
    result = attention_localisation([words], [maps], [[RED_CIRCLE]])
    assert result == {"hit_rate": None, "chance": None, "words": 0, "phrases": 0, "unmatched": 1}
    # A stated size must match too.
    words = "a small red circle".split()
    result = attention_localisation([words], [one_hot_maps([(0, 0)] * 4)], [[RED_CIRCLE]])
    assert result["unmatched"] == 1


def test_plot_attention_writes_one_panel_per_word(tmp_path):
    image = np.random.default_rng(0).integers(0, 255, (128, 96, 3))
    figure = plot_attention(
        image,
        ["a", "red", "circle"],
        np.random.default_rng(1).random((4, 8, 6)),
        tmp_path / "plot.png",
        columns=3,
    )
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles == ["input", "a", "red", "circle", "<end>"]
    assert (tmp_path / "plot.png").stat().st_size > 1000


def test_plot_attention_to_a_file_leaves_the_callers_backend_and_pyplot_alone(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a backend Agg is not: a switch would show
    try:
        open_figures = plt.get_fignums()
        figure = plot_attention(
            np.zeros((32, 32, 3)), ["a"], np.full((2, 4, 4), 1 / 16), tmp_path / "p.png"
        )
        assert matplotlib.get_backend() == "svg"
        assert plt.get_fignums() == open_figures  # pyplot never held the figure
        assert figure.axes and (tmp_path / "p.png").stat().st_size > 500
    finally:
        matplotlib.use(before)


def test_plot_captions_draws_each_image_with_its_caption_and_reference(tmp_path):
    from keras_saat.evaluation.plots import plot_captions

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (32, 32, 3)) for _ in range(5)]
    captions = [f"a red circle number {k}" for k in range(5)]
    references = [f"a reference {k}" for k in range(5)]
    figure = plot_captions(images, captions, references, columns=3, path=tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 0
    drawn = [ax for ax in figure.axes if ax.images]
    assert len(drawn) == 5  # six panels, the sixth empty
    for ax, caption, reference in zip(drawn, captions, references, strict=True):
        texts = [t.get_text().replace("\n", " ") for t in ax.texts]
        assert texts == [caption, reference]
        np.testing.assert_array_equal(ax.images[0].get_array(), images[drawn.index(ax)])
    with pytest.raises(ValueError, match="one caption"):
        plot_captions(images, captions[:4])
