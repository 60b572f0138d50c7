"""Draws the tutorial's "your own picture" scenes: Shapes-like scenes as a person draws them
in an editor, not as the renderer does.

What differs from the Shapes world (shared/SHAPES.md): a page of its own colour (paper
white, grey, a pale blue, a dark slate) with a lighting gradient across it; marker
colours near, not equal to, the world's; shapes of freehand size and outline (wobbly
vertices, a dark pen line around the fill); no sensor noise, and a JPEG's blocks. One
scene imitates a phone photo of such a page: the sheet seen at a slant on a wooden table,
its shadow, a vignette, the lens's blur and the sensor's noise.

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

# file name -> (page colour, [(shape, marker RGB, (cx, cy) in 0-1, radius in 0-1)]); the
# names ending in _photo.jpg are photographed (`photograph`).
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
    "white_square_above_yellow_triangle_dark_page.jpg": (
        (44, 56, 62),
        [("square", (238, 236, 228), (0.5, 0.17), 0.11), ("triangle", (240, 208, 70), (0.52, 0.83), 0.12)],
    ),
    "blue_circle_left_of_red_triangle_photo.jpg": (
        (238, 234, 222),
        [("circle", (58, 92, 214), (0.18, 0.5), 0.12), ("triangle", (212, 52, 48), (0.82, 0.49), 0.12)],
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


def _perspective_coefficients(source, target):
    """PIL's PERSPECTIVE data: the 8 numbers mapping each output corner in `target` back to
    its input corner in `source` (4 (x, y) pairs each)."""
    rows, values = [], []
    for (x, y), (u, v) in zip(target, source, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        values += [u, v]
    return np.linalg.solve(np.array(rows, float), np.array(values, float))


def photograph(page_image, seed):
    """A phone photo of a drawn page: the sheet at a slant on a wooden table, with its shadow,
    a vignette, a little blur and the sensor's noise. SIDE x SIDE RGB."""
    from PIL import ImageFilter

    rng = np.random.default_rng(seed)
    big = int(SIDE * 1.25)
    grain = np.sin(np.linspace(0, 40, big))[:, None] * 9 + rng.normal(0, 4, (big, big))
    table = np.clip(np.array([150, 104, 64], float)[None, None] + grain[..., None], 0, 255)
    photo = Image.fromarray(table.astype(np.uint8))
    # The sheet's corners in the photo: a slight slant and perspective (top edge shorter).
    corners = [(0.10, 0.07), (0.91, 0.10), (0.95, 0.94), (0.06, 0.91)]
    target = [(x * big, y * big) for x, y in corners]
    source = [(0, 0), (SIDE, 0), (SIDE, SIDE), (0, SIDE)]
    shadow = Image.new("L", (big, big), 0)
    ImageDraw.Draw(shadow).polygon([(x + 9, y + 11) for x, y in target], fill=110)
    shadow = shadow.filter(ImageFilter.GaussianBlur(8))
    photo = Image.composite(Image.new("RGB", (big, big), (40, 28, 18)), photo, shadow)
    sheet = page_image.transform(
        (big, big), Image.PERSPECTIVE, tuple(_perspective_coefficients(source, target)),
        Image.BICUBIC,
    )  # fmt: skip
    mask = Image.new("L", (big, big), 0)
    ImageDraw.Draw(mask).polygon(target, fill=255)
    photo = Image.composite(sheet, photo, mask).filter(ImageFilter.GaussianBlur(1.3))
    yy, xx = np.mgrid[0:big, 0:big] / big - 0.5
    vignette = 1.0 - 0.45 * (xx**2 + yy**2)
    pixels = np.asarray(photo, float) * vignette[..., None] + rng.normal(0, 6, (big, big, 3))
    photo = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return photo.resize((SIDE, SIDE), Image.LANCZOS)


def main():
    assert set(SCENES) == set(HAND_DRAWN)
    OUT.mkdir(parents=True, exist_ok=True)
    for seed, (name, (page, objects)) in enumerate(SCENES.items()):
        path = OUT / name
        image = draw(page, objects, seed)
        if name.endswith("_photo.jpg"):
            image = photograph(image, seed)
        image.save(path, quality=88 if not name.endswith("_photo.jpg") else 80)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
