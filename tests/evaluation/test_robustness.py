"""The robustness rows' scenes: each shift changes what its name says and nothing else."""

import numpy as np
import pytest

from keras_saat.data.shapes import BACKGROUND_MAX, object_mask, render
from keras_saat.evaluation.robustness import (
    SHIFTS,
    plain_caption,
    render_shifted,
    render_views,
    robustness_scenes,
    robustness_table,
    shift_by_name,
)

SCENES = robustness_scenes(12, seed=3)


def background_mask(objects):
    """Pixels no object covers, with a 2-pixel margin (anti-aliasing free, but be safe)."""
    covered = np.zeros((128, 128), bool)
    for obj in objects:
        grown = dict(
            obj, box=[obj["box"][0] - 2, obj["box"][1] - 2, obj["box"][2] + 2, obj["box"][3] + 2]
        )
        covered |= object_mask(grown)
    return ~covered


def test_in_distribution_is_the_worlds_renderer_and_every_shift_keeps_the_scenes():
    plain = render_shifted(SCENES, shift_by_name("in distribution"), seed=5)
    rng = np.random.default_rng([5, 1])
    np.testing.assert_array_equal(plain, np.stack([render(o, rng) for o in SCENES]))
    assert SHIFTS[0].name == "in distribution" and len({s.name for s in SHIFTS}) == len(SHIFTS)
    for shift in SHIFTS[1:]:
        shifted = render_shifted(SCENES, shift, seed=5)
        side = round(128 * shift.scale)
        assert shifted.shape == (len(SCENES), side, side, 3) and shifted.dtype == np.uint8
        assert not np.array_equal(shifted[:, :128, :128], plain[:, :side, :side]), shift.name


@pytest.mark.parametrize("name", ["background 40-100", "background 160-220"])
def test_a_background_shift_moves_the_background_and_leaves_the_objects(name):
    shift = shift_by_name(name)
    plain = render_shifted(SCENES, SHIFTS[0], seed=1).astype(float)
    shifted = render_shifted(SCENES, shift, seed=1).astype(float)
    low, high = shift.background
    for objects, before, after in zip(SCENES, plain, shifted, strict=True):
        back = background_mask(objects)
        colour = np.median(after[back], axis=0)  # (3,): the drawn background, noise aside
        assert np.all(colour >= low - 3) and np.all(colour <= high + 3), colour
        assert np.median(before[back]) <= BACKGROUND_MAX + 3
        inside = np.zeros((128, 128), bool)
        for obj in objects:
            inside |= object_mask(obj)
        # The same noise draws on the same object colours: clipping at 0/255 aside, equal.
        same = np.abs(after[inside] - before[inside]) <= 1
        assert same.mean() > 0.97, (name, same.mean())


def test_contrast_cast_and_exposure_change_the_pixels_as_named():
    plain = render_shifted(SCENES, SHIFTS[0], seed=2).astype(float)
    brighter = render_shifted(SCENES, shift_by_name("exposure +40"), seed=2).astype(float)
    unclipped = plain < 200
    np.testing.assert_allclose((brighter - plain)[unclipped], 40, atol=1)
    flat = render_shifted(SCENES, shift_by_name("contrast 0.6"), seed=2).astype(float)
    assert np.isclose(flat.std(axis=(1, 2, 3)) / plain.std(axis=(1, 2, 3)), 0.6, atol=0.03).all()
    warm = render_shifted(SCENES, shift_by_name("colour cast"), seed=2).astype(float)
    means = warm.mean(axis=(0, 1, 2)) / plain.mean(axis=(0, 1, 2))
    assert means[0] > 1.08 and abs(means[1] - 1) < 0.01 and means[2] < 0.88, means


def test_uneven_light_dims_page_and_objects_towards_one_edge_by_the_falloff_named():
    plain = render_shifted(SCENES, SHIFTS[0], seed=6).astype(float)
    lit = render_shifted(SCENES, shift_by_name("uneven light"), seed=6).astype(float)
    # Light is a gain: where the world's pixels are bright (objects), the ratio is the light.
    ratio = lit.sum(-1) / np.maximum(plain.sum(-1), 1)  # (N, 128, 128)
    for objects, before, gain in zip(SCENES, plain, ratio, strict=True):
        inside = np.zeros((128, 128), bool)
        for obj in objects:
            inside |= object_mask(obj)
        bright = inside & (before.sum(-1) > 300)
        assert gain[bright].max() <= 1.02 and gain[bright].min() >= 0.7 - 0.03
    # Over the scenes, objects near a lit edge keep their light and near a far one lose 30 %.
    assert np.percentile(ratio[plain.sum(-1) > 300], 99.9) > 0.95
    assert np.percentile(ratio[plain.sum(-1) > 300], 0.1) < 0.78
    page = render_shifted(SCENES, shift_by_name("light page, uneven light"), seed=6).astype(float)
    light = render_shifted(SCENES, shift_by_name("background 160-220"), seed=6).astype(float)
    for objects, dim, even in zip(SCENES, page, light, strict=True):
        back = background_mask(objects)
        gain = dim[back].sum(-1) / even[back].sum(-1)
        assert 0.65 < gain.min() < 0.8 and gain.max() > 0.95  # one edge dimmed, one lit


def test_resolution_and_jpeg_shifts_lose_detail_but_keep_the_picture():
    plain = render_shifted(SCENES, SHIFTS[0], seed=4).astype(float)
    for name in ("JPEG quality 30", "half resolution"):
        shifted = render_shifted(SCENES, shift_by_name(name), seed=4).astype(float)
        if shifted.shape[1] != 128:
            shifted = np.repeat(np.repeat(shifted, 2, 1), 2, 2)
        error = np.abs(shifted - plain).mean()
        assert 1 < error < 12, (name, error)  # changed, and still the same scene


def test_the_table_shows_each_row_and_its_change():
    rows = [
        {"shift": "in distribution", "changes": "nothing", "bleu_4": 0.9612, "hit_rate": 0.97,
         "chance": 0.2, "bleu_4_change": 0.0},
        {"shift": "noise", "changes": "noise", "bleu_4": 0.9, "hit_rate": None, "chance": 0.0,
         "bleu_4_change": -0.0612},
    ]  # fmt: skip
    lines = robustness_table(rows).splitlines()
    assert lines[2] == "| in distribution | nothing | 0.961 | +0.000 | 0.970 |"
    assert lines[3] == "| noise | noise | 0.900 | -0.061 | - |"


def test_an_unknown_shift_is_named():
    with pytest.raises(KeyError, match="unknown shift 'sepia'.*in distribution"):
        shift_by_name("sepia")


@pytest.mark.parametrize("name", ["rotated 5-8 degrees", "hand-drawn", "photographed sheet"])
def test_a_readers_view_keeps_the_captions_and_reports_where_the_objects_went(name):
    """The views a reader makes keep each object's cell (its caption) and report its box in
    the picture, which attention is scored against."""
    pixels, seen = render_views(SCENES, shift_by_name(name), seed=2)
    assert pixels.shape == (len(SCENES), 128, 128, 3) and pixels.dtype == np.uint8
    plain = render_shifted(SCENES, SHIFTS[0], seed=2).astype(float)
    assert np.abs(pixels - plain).mean() > 5
    moved = 0
    for objects, shown in zip(SCENES, seen, strict=True):
        assert [o["cell"] for o in shown] == [o["cell"] for o in objects]
        for obj in shown:
            x0, y0, x1, y1 = obj["box"]
            row, col = int((y0 + y1) / 2 * 3 // 128), int((x0 + x1) / 2 * 3 // 128)
            assert (row, col) == tuple(obj["cell"])
        moved += [o["box"] for o in shown] != [o["box"] for o in objects]
    assert moved == 0 if name == "hand-drawn" else moved == len(SCENES)


def test_plain_caption_is_how_the_hand_drawn_scenes_are_named():
    assert plain_caption("a picture of a small red circle above a large blue square") == (
        "a red circle above a blue square"
    )
    assert plain_caption("there is a white square in the center") == "a white square in the center"
    assert plain_caption("a green diamond a red circle and a small white square") == (
        "a green diamond a red circle and a white square"
    )
