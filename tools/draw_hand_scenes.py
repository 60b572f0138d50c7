"""Draws the tutorial's "your own picture" scenes: Shapes-like scenes as a person draws them
in an editor, not as the renderer does.

What differs from the Shapes world (shared/SHAPES.md): a light page (paper white, grey,
a pale blue) instead of a dark background, with a lighting gradient across it; marker
colours near, not equal to, the world's; shapes of freehand size and outline (wobbly
vertices, a dark pen line around the fill); no sensor noise, and a JPEG's blocks.

    python tools/draw_hand_scenes.py        # writes keras_saat/data/hand_drawn/*.jpg

The captions a reader should expect are `keras_saat.data.shapes.HAND_DRAWN`'s.
"""

import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from keras_saat.data.shapes import HAND_DRAWN, HAND_DRAWN_DIR  # noqa: E402

OUT = HAND_DRAWN_DIR
SIDE = 384  # drawn larger than the model's 128 x 128, as a screenshot would be

# file name -> (page colour, [(shape, marker RGB, (cx, cy) in 0-1, radius in 0-1)])
SCENES = {
    "red_circle_above_blue_square.jpg": (
        (242, 238, 226),
        [("circle", (214, 46, 52), (0.52, 0.18), 0.12), ("square", (52, 84, 222), (0.47, 0.82), 0.11)],
    ),
    "green_triangle_left_of_purple_diamond.jpg": (
        (178, 178, 172),
        [("triangle", (54, 182, 84), (0.17, 0.5), 0.12), ("diamond", (152, 74, 204), (0.83, 0.48), 0.12)],
    ),
    "yellow_square_in_the_center.jpg": (
        (214, 226, 240),
        [("square", (232, 206, 52), (0.5, 0.51), 0.13)],
    ),
}  # fmt: skip


def outline(shape, cx, cy, r, rng):
    """A freehand polygon: the shape's corners (or 28 points of a circle), each moved a little."""
    if shape == "circle":
        angles = np.linspace(0, 2 * np.pi, 28, endpoint=False)
        points = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1)
    elif shape == "square":
        points = np.array([[cx - r, cy - r], [cx + r, cy - r], [cx + r, cy + r], [cx - r, cy + r]])
    elif shape == "triangle":
        points = np.array([[cx, cy - r], [cx + r, cy + r], [cx - r, cy + r]])
    else:  # diamond
        points = np.array([[cx, cy - r], [cx + r, cy], [cx, cy + r], [cx - r, cy]])
    points = points + rng.normal(0, 0.04 * r, points.shape)
    return [tuple(p) for p in points]


def draw(page, objects, seed):
    """One scene: SIDE x SIDE RGB uint8."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(1.03, 0.94, SIDE)[None, :, None]  # light from the left
    pixels = np.clip(np.asarray(page, float)[None, None, :] * ramp, 0, 255)
    image = Image.fromarray(np.repeat(pixels, SIDE, 0).astype(np.uint8))
    pen = ImageDraw.Draw(image)
    for shape, colour, (x, y), radius in objects:
        points = outline(shape, x * SIDE, y * SIDE, radius * SIDE, rng)
        pen.polygon(points, fill=colour, outline=(40, 40, 40), width=3)
    return image


def main():
    assert set(SCENES) == set(HAND_DRAWN)
    OUT.mkdir(parents=True, exist_ok=True)
    for seed, (name, (page, objects)) in enumerate(SCENES.items()):
        path = OUT / name
        draw(page, objects, seed).save(path, quality=88)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
