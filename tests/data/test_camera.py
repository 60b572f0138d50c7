"""Views a reader makes of a Shapes scene: drawn by hand, photographed. The captions' places
are the sheet's, so every view must keep each object in its cell, and the boxes it reports
must be where its pixels put the object."""

import numpy as np
import pytest

from keras_saat.data import camera, shapes


def _centre_cell(obj):
    x0, y0, x1, y1 = obj["box"]
    return int((y0 + y1) / 2 // shapes.CELL), int((x0 + x1) / 2 // shapes.CELL)


def test_every_view_keeps_each_object_in_its_cell_and_names_the_same_objects():
    rng = np.random.default_rng(0)
    moved = 0
    for _ in range(150):
        objects = shapes.sample_objects(rng)
        pixels, seen = camera.varied_view(objects, rng)
        assert pixels.shape == (128, 128, 3) and pixels.dtype == np.uint8
        assert len(seen) == len(objects)
        for before, after in zip(objects, seen, strict=True):
            assert {k: v for k, v in after.items() if k != "box"} == {
                k: v for k, v in before.items() if k != "box"
            }
            assert _centre_cell(after) == tuple(before["cell"])
            moved += after["box"] != before["box"]
    assert moved > 50  # the photographs did move boxes


@pytest.mark.parametrize("table", [True, False])
def test_a_photographed_objects_box_is_where_its_pixels_are(table):
    """One blue square on a grey sheet: the blue pixels' centre in the photograph is the
    reported box's centre, and their extent its side (the map's direction and scale)."""
    rng = np.random.default_rng(3)
    for _ in range(8):
        obj = {"shape": "square", "colour": "blue", "size": "large", "cell": [1, 1]}
        cx, cy = 64 + rng.uniform(-5, 5, 2)
        obj["box"] = [cx - 16, cy - 16, cx + 16, cy + 16]
        sheet = shapes.render([obj], rng, (120, 130))
        pixels, (seen,) = camera.photographed(sheet, [obj], rng, table=table)
        rgb = pixels.astype(float)
        mask = rgb[..., 2] - rgb[..., :2].max(-1) > 50  # no table or sheet is blue
        rows, cols = np.nonzero(mask)
        x0, y0, x1, y1 = seen["box"]
        assert abs(cols.mean() + 0.5 - (x0 + x1) / 2) < 1.5
        assert abs(rows.mean() + 0.5 - (y0 + y1) / 2) < 1.5
        assert abs(np.sqrt(mask.sum()) - (x1 - x0)) < 0.12 * (x1 - x0)


def test_a_hand_drawn_sheet_has_wobbly_outlines_a_pen_line_and_marker_colours():
    rng = np.random.default_rng(1)
    obj = {"shape": "circle", "colour": "blue", "size": "large", "cell": [1, 1]}
    obj["box"] = [48.0, 48.0, 80.0, 80.0]
    exact = shapes.object_mask(obj)
    pixels, (drawn,) = camera.hand_drawn_sheet([obj], rng)
    assert drawn == obj
    image = pixels.astype(float)
    page = np.median(image[~shapes.object_mask({**obj, "box": [40, 40, 88, 88]})], axis=0)
    assert page.min() >= camera.PAPER[0] - 30  # a light page
    ink = np.abs(image - page).sum(-1) > 60
    assert 0.6 < (ink & exact).sum() / (ink | exact).sum() < 1.0  # near the shape, not it
    inside = shapes.object_mask({**obj, "box": [56, 56, 72, 72]})
    fill = np.median(image[inside], axis=0)
    assert np.abs(fill - shapes.COLOURS["blue"]).max() < 40  # a marker near the world's blue
    dark = image.sum(-1) < 3 * camera.PEN[1] + 30
    ring = exact ^ shapes.object_mask({**obj, "box": [51, 51, 77, 77]})
    assert dark[ring].mean() > 0.15 and not dark[inside].any()  # a pen line, not a fill


def test_an_outline_without_wobble_is_the_worlds():
    obj = {"shape": "triangle", "box": [40.0, 40.0, 72.0, 72.0]}
    still = np.array([[2, 0.0, 1.0], [3, 0.0, 0.5]])
    np.testing.assert_array_equal(shapes.object_mask(obj, wobble=still), shapes.object_mask(obj))
    moved = shapes.object_mask(obj, wobble=np.array([[3, 0.1, 0.0]]))
    assert (moved != shapes.object_mask(obj)).sum() > 20
