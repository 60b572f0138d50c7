"""Shapes scenes as a reader makes them: drawn by hand on paper, and photographed.

A hand-drawn sheet has wobbly outlines, a pen line round each shape and marker colours
near the world's; a photograph puts the sheet on a table, smaller in the frame, turned
and tilted a little, through a lens's blur and vignette and a JPEG. A caption's places
are the sheet's, so the objects keep their cells (their captions) while their boxes
follow the sheet into the frame: the boxes are what attention is scored against and what
the CNN's pre-training labels.
"""

import io

import numpy as np
from PIL import Image, ImageFilter

from keras_saat.data.shapes import (
    COLOURS,
    GRID,
    IMAGE_SIZE,
    NOISE_SIGMA,
    light_field,
    object_mask,
    page_scene,
    render,
)

PAPER = (170, 250)  # a sheet's level per channel: grey to white paper
PEN = (15, 80)  # the pen line's grey level
WOBBLE = 0.06  # each of a hand-drawn outline's four harmonics moves its edge by up to 6 %
TILT = 8.0  # degrees a photographed sheet is turned by, either way
SHEET = (0.72, 1.05)  # the sheet's side as a share of the frame's
# Surfaces under a sheet: wood, a grey desk, a dark one (RGB ranges, low and high).
TABLES = (
    ((110, 70, 35), (175, 125, 80)),
    ((80, 80, 80), (150, 150, 150)),
    ((15, 15, 15), (60, 60, 60)),
)


def hand_drawn_sheet(objects, rng):
    """`objects` drawn on paper by hand: (128, 128, 3) uint8 and the objects as drawn (the
    same boxes; the outline's wobble stays inside the box's cell)."""
    page = rng.integers(*PAPER, endpoint=True) + rng.integers(-8, 9, size=3)
    image = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3))
    image[:] = page
    pen = rng.integers(*PEN, endpoint=True)
    for obj in objects:
        wobble = np.stack(
            [np.arange(2, 6), rng.uniform(0, WOBBLE, 4), rng.uniform(0, 2 * np.pi, 4)], 1
        )
        marker = np.clip(np.asarray(COLOURS[obj["colour"]]) + rng.normal(0, 10, 3), 0, 255)
        shape = object_mask(obj, wobble=wobble)
        image[shape] = marker
        if rng.random() < 0.5:  # a marker's strokes leave the paper showing through
            rows, cols = np.nonzero(shape)
            gap = 0.15 * np.maximum(np.sin((rows + cols) * rng.uniform(0.8, 1.6)), 0)[:, None]
            image[shape] = (1 - gap) * marker + gap * page
        width = rng.uniform(0.8, 2.2)
        inner = object_mask(_shrunk(obj, width), wobble=wobble)
        image[shape & ~inner] = pen
    image *= light_field(rng, rng.uniform(0.0, 0.25))[..., None]
    image += rng.normal(0.0, rng.uniform(2.0, NOISE_SIGMA), image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), objects


def photographed(sheet, objects, rng, scale=SHEET, tilt=(0.0, TILT), table=True):
    """A photograph of `sheet` ((S, S, 3) uint8): on a table, `scale` of the frame (a range),
    turned by `tilt` degrees (a range, either way) with a little perspective, blurred,
    vignetted and saved as a JPEG. Returns (S, S, 3) uint8 and the objects with their
    boxes in the frame.

    `table` False fills round the sheet with its median colour and leaves out the lens:
    a scan turned.
    """
    side = sheet.shape[0]
    to_frame = _placement(side, objects, rng, scale, tilt, table)
    to_sheet = np.linalg.inv(to_frame)
    to_sheet /= to_sheet[2, 2]
    coefficients = tuple(to_sheet.flatten()[:8])
    warp = dict(resample=Image.Resampling.BILINEAR)
    view = np.asarray(
        Image.fromarray(sheet).transform(
            (side, side), Image.Transform.PERSPECTIVE, coefficients, **warp
        ),
        np.float64,
    )
    alpha = Image.new("L", (side, side), 255)
    alpha = np.asarray(
        alpha.transform((side, side), Image.Transform.PERSPECTIVE, coefficients, **warp)
    )
    alpha = (alpha / 255.0)[..., None]
    if table:
        low, high = TABLES[int(rng.integers(len(TABLES)))]
        surface = rng.integers(low, high, endpoint=True).astype(np.float64)
        direction = rng.uniform(0, np.pi)
        coords = np.arange(side) + 0.5
        along = np.cos(direction) * coords[None, :] + np.sin(direction) * coords[:, None]
        grain = np.sin(along * rng.uniform(0.2, 0.8)) * rng.uniform(0, 14)
        under = surface + grain[..., None]
    else:
        under = np.median(sheet.reshape(-1, 3), axis=0)
    image = alpha * view + (1 - alpha) * under
    if table:
        image *= light_field(rng, rng.uniform(0.0, 0.3))[..., None]
        radius = np.hypot(*np.meshgrid(coords - side / 2, coords - side / 2)) / (side / np.sqrt(2))
        image *= (1 - rng.uniform(0.0, 0.35) * radius**2)[..., None]
    image = np.clip(np.rint(image + rng.normal(0, rng.uniform(1, 5), image.shape)), 0, 255)
    picture = Image.fromarray(image.astype(np.uint8))
    if table:
        picture = picture.filter(ImageFilter.GaussianBlur(rng.uniform(0.2, 1.0)))
    pixels = as_jpeg(picture, int(rng.integers(40, 91)))
    return pixels, [_moved(obj, to_frame) for obj in objects]


def as_jpeg(picture, quality):
    """`picture` (a PIL image or uint8 pixels) saved as a JPEG and read back: uint8 pixels."""
    if isinstance(picture, np.ndarray):
        picture = Image.fromarray(picture)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=quality)
    return np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))


def camera_scene(objects, rng):
    """A sheet (hand-drawn, or rendered on paper) photographed: `photographed`'s result."""
    if rng.random() < 0.5:
        sheet, objects = hand_drawn_sheet(objects, rng)
    else:
        level = int(rng.integers(*PAPER, endpoint=True)) - 30
        sheet = render(objects, rng, (level, level + 30))
    return photographed(sheet, objects, rng, table=rng.random() < 0.8)


def varied_view(objects, rng):
    """A training view outside the world's photometry: (pixels, the objects as it shows
    them). A third are on a page under uneven light (`page_scene`), the rest a camera's
    (`camera_scene`): the harder views get the larger share."""
    if rng.random() < 1 / 3:
        return page_scene(objects, rng), objects
    return camera_scene(objects, rng)


def camera_settings():
    """How `camera_scene` draws, as the records that depend on it store it."""
    return {"paper": list(PAPER), "wobble": WOBBLE, "tilt": TILT, "sheet": list(SHEET)}


def _placement(side, objects, rng, scale, tilt, table, tries=20):
    """The map from the sheet to the frame: scaled, turned, moved and (on a table) seen at
    a slight slant, redrawn until every object's centre stays in its cell of the frame's
    grid, as its caption places it (centred and upright if no draw does)."""
    corners = np.array([[0, 0], [side, 0], [side, side], [0, side]], float)
    for attempt in range(tries + 1):
        last = attempt == tries
        s = rng.uniform(*scale)
        angle = 0.0 if last else np.deg2rad(rng.uniform(*tilt) * rng.choice([-1, 1]))
        shift = 0.0 if last else rng.uniform(-1, 1, 2) * max(2.0, (1 - s) * side * 0.35)
        rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        frame = side / 2 + shift + (corners - side / 2) @ rotation.T * s
        if table and not last:  # perspective: each corner a little off
            frame += rng.normal(0, 0.015 * side, frame.shape)
        to_frame = _homography(corners, frame)
        if all(_cell(_moved(o, to_frame), side) == tuple(o["cell"]) for o in objects):
            return to_frame
    return to_frame


def _cell(obj, side):
    x0, y0, x1, y1 = obj["box"]
    return int((y0 + y1) / 2 * GRID // side), int((x0 + x1) / 2 * GRID // side)


def _shrunk(obj, width):
    x0, y0, x1, y1 = obj["box"]
    return {**obj, "box": [x0 + width, y0 + width, x1 - width, y1 - width]}


def _homography(source, target):
    """The 3x3 projective map taking the four `source` points to the four `target` ones."""
    rows, values = [], []
    for (x, y), (u, v) in zip(source, target, strict=True):
        rows += [[x, y, 1, 0, 0, 0, -u * x, -u * y], [0, 0, 0, x, y, 1, -v * x, -v * y]]
        values += [u, v]
    return np.append(np.linalg.solve(np.array(rows), np.array(values)), 1.0).reshape(3, 3)


def _moved(obj, to_frame):
    """`obj` with its box where the sheet's map puts it: the centre mapped, the radius
    scaled by the map's local scale there."""
    x0, y0, x1, y1 = obj["box"]
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    points = np.array([[cx, cy, 1], [cx + 1, cy, 1], [cx, cy + 1, 1]]) @ to_frame.T
    points = points[:, :2] / points[:, 2:]
    scale = np.sqrt(abs(np.cross(points[1] - points[0], points[2] - points[0])))
    (u, v), r = points[0], r * scale
    return {**obj, "box": [float(u - r), float(v - r), float(u + r), float(v + r)]}
