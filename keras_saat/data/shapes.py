"""The Shapes world (shared/SHAPES.md): a rendered captioning task with known answers.

Each 128x128 image holds 1-3 coloured shapes in distinct cells of a 3x3 grid;
its five reference captions name each object's colour, shape, size, position
and relations in a closed 31-word vocabulary. Ground-truth boxes let attention
be scored. `keras_saat.data.shapes_dataset` writes it in the Karpathy split format.
"""

from pathlib import Path

import numpy as np

IMAGE_SIZE = 128
GRID = 3
CELL = IMAGE_SIZE / GRID
SHAPES = ("circle", "square", "triangle", "diamond")
COLOURS = {
    "red": (220, 50, 50),
    "green": (60, 190, 80),
    "blue": (60, 90, 230),
    "yellow": (235, 215, 60),
    "white": (235, 235, 235),
    "purple": (160, 80, 210),
}
SIZES = {"small": 9, "large": 16}
POSITIONS = {
    (0, 0): "at the top left",
    (0, 1): "at the top",
    (0, 2): "at the top right",
    (1, 0): "on the left",
    (1, 1): "in the center",
    (1, 2): "on the right",
    (2, 0): "at the bottom left",
    (2, 1): "at the bottom",
    (2, 2): "at the bottom right",
}
PREFIXES = ("", "there is ", "an image of ", "a picture of ")
# Shapes-like scenes made outside the renderer (tools/draw_hand_scenes.py): drawn as a
# person draws them in an editor (light pages and a dark one, a lighting gradient, marker
# colours, freehand outlines with a pen line), and one made to look like a phone photo of
# such a page; 384 x 384 JPEGs. File name -> the caption a model that names what it sees
# should give.
HAND_DRAWN_DIR = Path(__file__).parent / "hand_drawn"
HAND_DRAWN = {
    "red_circle_above_blue_square.jpg": "a red circle above a blue square",
    "green_triangle_left_of_purple_diamond.jpg": "a green triangle to the left of a purple diamond",
    "yellow_square_in_the_center.jpg": "a yellow square in the center",
    "white_square_above_yellow_triangle_dark_page.jpg": "a white square above a yellow triangle",
    "blue_circle_left_of_red_triangle_photo.jpg": "a blue circle to the left of a red triangle",
}
NOISE_SIGMA = 8.0
JITTER = 5.0
BACKGROUND_MAX = 60


def sample_objects(rng):
    """Draws 1-3 objects in distinct cells, listed in reading order (row, then column)."""
    count = int(rng.integers(1, 4))
    cells = sorted(int(c) for c in rng.choice(GRID * GRID, size=count, replace=False))
    objects = []
    for cell in cells:
        row, col = divmod(cell, GRID)
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
        size = list(SIZES)[int(rng.integers(len(SIZES)))]
        jx, jy = rng.uniform(-JITTER, JITTER, size=2)
        cx, cy = (col + 0.5) * CELL + jx, (row + 0.5) * CELL + jy
        r = SIZES[size]
        objects.append(
            {
                "shape": shape,
                "colour": colour,
                "size": size,
                "cell": [row, col],
                "box": [float(cx - r), float(cy - r), float(cx + r), float(cy + r)],
            }
        )
    return objects


def object_mask(obj, image_size=IMAGE_SIZE, wobble=None):
    """Boolean (H, W) mask of an object's pixels (pixel centres at integer + 0.5).

    `wobble`, rows of (harmonic k, amplitude a, phase p), draws the outline as a hand
    does: the edge at angle t from the centre moved out by 1 + sum(a sin(k t + p)).
    """
    x0, y0, x1, y1 = obj["box"]
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    coords = np.arange(image_size) + 0.5
    dx = coords[None, :] - cx  # (1, W)
    dy = coords[:, None] - cy  # (H, 1)
    if wobble is not None:
        angle = np.arctan2(dy, dx)[..., None]
        k, a, p = np.asarray(wobble, np.float64).T
        edge = 1 + (a * np.sin(k * angle + p)).sum(-1)
        dx, dy = dx / edge, dy / edge
    shape = obj["shape"]
    if shape == "circle":
        return dx**2 + dy**2 <= r**2
    if shape == "square":
        return (np.abs(dx) <= r) & (np.abs(dy) <= r)
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= r
    if shape == "triangle":
        # Apex (cx, cy - r), base corners (cx -/+ r, cy + r): below the apex, above the
        # base, and inside both slanted edges |dx| <= (dy + r) / 2.
        return (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    raise ValueError(f"unknown shape {shape!r}")


def render(objects, rng, background=(0, BACKGROUND_MAX), light=None):
    """Renders the objects on a noisy background of one colour: (128, 128, 3) uint8.

    Args:
        objects: list of object dicts (`sample_objects`).
        rng: numpy Generator.
        background: (low, high) ints. Each background channel is drawn uniformly from
            [low, high]. Defaults to the Shapes world's (0, 60); wider ranges render the
            scenes the world's contract leaves out (pre-training views, robustness checks).
        light: (128, 128) array or None. The light falling on the scene, as a gain on
            page and objects alike before the sensor's noise (`light_field`). Defaults
            to None: the world's even light.
    """
    low, high = background
    background = rng.integers(low, high + 1, size=3)
    image = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.float64)
    image[:] = background
    for obj in objects:
        image[object_mask(obj)] = COLOURS[obj["colour"]]
    if light is not None:
        image *= np.asarray(light, np.float64)[..., None]
    image += rng.normal(0.0, NOISE_SIGMA, size=image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def _object_phrase(obj, with_size):
    words = (
        ["a", obj["size"], obj["colour"], obj["shape"]]
        if with_size
        else ["a", obj["colour"], obj["shape"]]
    )
    return " ".join(words)


def caption(objects, prefix="", with_size=False):
    """One caption of a scene, following the grammar of shared/SHAPES.md."""
    phrases = [_object_phrase(o, with_size) for o in objects]
    if len(objects) == 1:
        body = f"{phrases[0]} {POSITIONS[tuple(objects[0]['cell'])]}"
    elif len(objects) == 2:
        same_row = objects[0]["cell"][0] == objects[1]["cell"][0]
        relation = "to the left of" if same_row else "above"
        body = f"{phrases[0]} {relation} {phrases[1]}"
    elif len(objects) == 3:
        body = f"{phrases[0]} {phrases[1]} and {phrases[2]}"
    else:
        raise ValueError(f"a scene has 1-3 objects, got {len(objects)}")
    return prefix + body


def reference_captions(objects):
    """The five references: prefix k mod 4, sizes named for odd k."""
    return [caption(objects, PREFIXES[k % 4], with_size=k % 2 == 1) for k in range(5)]


def vocabulary_words():
    """The closed vocabulary of the Shapes world (31 words)."""
    words = {"a", "and", "above", "to", "the", "left", "of"}
    words.update(SHAPES, COLOURS, SIZES)
    for phrase in (*POSITIONS.values(), *PREFIXES):
        words.update(phrase.split())
    return sorted(words)


# Pages of the scenes drawn outside the world's dark background: each scene's channels
# from [level, level + PAGE_BAND], the level from PAGE_LEVEL: dark, grey and light pages
# with a tint, up to white paper (the white objects, 235, fade into the lightest).
PAGE_LEVEL = (0, 205)
PAGE_BAND = 50


def page_background(rng):
    """A random page's background range, for `render`'s `background`."""
    level = int(rng.integers(PAGE_LEVEL[0], PAGE_LEVEL[1] + 1))
    return (level, level + PAGE_BAND)


# Uneven light, as a lamp or a window lights a page: the light falls off linearly across
# the picture in a random direction, the dimmest side or corner darker than the lit one by
# a share drawn from [0, LIGHT_FALLOFF]. On a light page lit so, a CNN and decoder that
# only saw even light name objects that are not there.
LIGHT_FALLOFF = 0.35


def light_field(rng, falloff=None, size=IMAGE_SIZE):
    """(size, size) gains in [1 - `falloff`, 1], falling off linearly in a direction drawn
    from `rng`: 1 at the lit edge or corner, 1 - `falloff` at the far one. `falloff` None
    draws it from [0, LIGHT_FALLOFF]; it must be in [0, 1)."""
    if falloff is None:
        falloff = rng.uniform(0.0, LIGHT_FALLOFF)
    if not 0.0 <= falloff < 1.0:
        raise ValueError(f"a light's falloff is a share of its light in [0, 1); got {falloff}")
    angle = rng.uniform(0.0, 2 * np.pi)
    coords = np.arange(size) + 0.5
    along = np.cos(angle) * coords[None, :] + np.sin(angle) * coords[:, None]
    along = (along - along.min()) / (along.max() - along.min())
    return 1.0 - float(falloff) * along


def page_settings():
    """How `page_scene` draws, as the records that depend on it store it (a varied world's
    generator settings, a pre-trained CNN's backbone.json)."""
    return {"pages": [*PAGE_LEVEL, PAGE_BAND], "light": LIGHT_FALLOFF}


def page_scene(objects, rng):
    """`objects` rendered as a picture outside the world's photometry: on a random page
    (`page_background`) under uneven light (`light_field`)."""
    return render(objects, rng, page_background(rng), light_field(rng))
