"""The Shapes world (shared/SHAPES.md): a rendered captioning task with known answers.

Each 128x128 image holds 1-3 coloured shapes in distinct cells of a 3x3 grid;
its five reference captions name each object's colour, shape, size, position
and relations in a closed 31-word vocabulary. Ground-truth boxes let attention
be scored. `write_shapes_dataset` writes the Karpathy split format.
"""

import json
from pathlib import Path

import numpy as np
from PIL import Image

from keras_saat.io_utils import write_text_atomic

DATASET_FILE = "dataset_shapes.json"  # what write_shapes_dataset writes, in Karpathy format
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


def object_mask(obj, image_size=IMAGE_SIZE):
    """Boolean (H, W) mask of an object's pixels (pixel centres at integer + 0.5)."""
    x0, y0, x1, y1 = obj["box"]
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    coords = np.arange(image_size) + 0.5
    dx = coords[None, :] - cx  # (1, W)
    dy = coords[:, None] - cy  # (H, 1)
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


def write_shapes_dataset(
    out_dir, train=2000, val=200, test=200, seed=0, log=None, varied=0.0, varied_copies=False
):
    """Generates a Shapes dataset in the Karpathy split format.

    Writes `out_dir/dataset_shapes.json` and `out_dir/images/NNNNNN.png`. The
    same seed and counts give byte-identical files.

    With `varied` > 0, that share of the training scenes is drawn on a random page under
    uneven light (`page_scene`) and through `keras_saat.images.photometry.photometric_augmentation`
    (exposure, contrast, hue, saturation), marked `"photometry": "varied"` in the JSON. The
    scenes, their objects and captions, and the val and test images are the same as at
    `varied` 0; the varied draws use a stream of their own. With `varied_copies`, a varied
    scene is a second view beside the world's: the world's image keeps its place and the
    varied one is a training image of its own after the test split, with the same captions.

    Args:
        out_dir: str or Path. Output folder (created).
        train: int. Training images. Defaults to 2000.
        val: int. Validation images. Defaults to 200.
        test: int. Test images. Defaults to 200.
        seed: int. Generator seed. Defaults to 0.
        log: callable or None. Receives progress lines. Defaults to None.
        varied: float. Share of the training scenes drawn under varied photometry, in
            [0, 1]. Defaults to 0 (the world's own photometry).
        varied_copies: bool. Add the varied views beside the world's scenes rather than
            drawing those scenes varied in their place. Defaults to False.

    Returns:
        Path of the dataset JSON file.
    """
    if not 0.0 <= varied <= 1.0:
        raise ValueError(f"varied is a share of the training scenes, in [0, 1]; got {varied}")
    out_dir = Path(out_dir)
    image_dir = out_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    varied_rng = np.random.default_rng([seed, 3])  # the world's own stream stays as it was
    pending = []  # (position in images, pixels) of the varied scenes
    splits = ["train"] * train + ["val"] * val + ["test"] * test
    images = []
    sentid = 0
    for imgid, split in enumerate(splits):
        objects = sample_objects(rng)
        pixels = render(objects, rng)
        filename = f"{imgid:06d}.png"
        if split == "train" and varied and varied_rng.random() < varied:
            view = page_scene(objects, varied_rng)
            pending.append((imgid, view))
            if varied_copies:
                _write_png(image_dir / filename, pixels)
        else:
            _write_png(image_dir / filename, pixels)
        images.append(_image_record(imgid, filename, split, objects, sentid))
        sentid += len(images[-1]["sentences"])
        if log and (imgid + 1) % 500 == 0:
            log(f"  rendered {imgid + 1}/{len(splits)} images")
    if varied_copies:  # each varied view becomes a training image of its own, at the end
        copies = []
        for imgid, view in pending:
            copy = len(splits) + len(copies)
            record = _image_record(
                copy, f"{copy:06d}.png", "train", images[imgid]["objects"], sentid
            )
            sentid += len(record["sentences"])
            images.append(record)
            copies.append((copy, view))
        pending = copies
    if pending:
        from keras_saat.images.photometry import augmented_uint8

        if log:
            log(f"  {len(pending)} training scenes on varied pages, under varied light")
        positions, pixels = zip(*pending, strict=True)
        for imgid, view in zip(positions, augmented_uint8(np.stack(pixels), seed), strict=True):
            images[imgid]["photometry"] = "varied"
            _write_png(image_dir / images[imgid]["filename"], view)
    path = out_dir / DATASET_FILE
    # filepath is relative to the JSON file's folder, as in Karpathy's COCO file. Written
    # last and atomically: a run killed before this point leaves no dataset to reuse.
    settings = generator_settings(train, val, test, seed, varied, varied_copies)
    write_text_atomic(
        path, json.dumps({"dataset": "shapes", "generator": settings, "images": images})
    )
    return path


def generator_settings(train, val, test, seed, varied=0.0, varied_copies=False):
    """What `write_shapes_dataset` was asked for, as stored in (and compared with) its JSON
    (`varied` only when it is not 0, and `varied_copies` only when it is set and counts, so
    a world's file is what it always was)."""
    settings = {"train": int(train), "val": int(val), "test": int(test), "seed": int(seed)}
    if varied:
        settings["varied"] = float(varied)
        settings.update({f"varied_{k}": v for k, v in page_settings().items()})
        if varied_copies:
            settings["varied_copies"] = True
    return settings


def _image_record(imgid, filename, split, objects, first_sentid):
    """One image's entry in the Karpathy-format JSON: its reference captions numbered from
    `first_sentid`."""
    sentences = [
        {"tokens": raw.split(), "raw": raw, "imgid": imgid, "sentid": first_sentid + k}
        for k, raw in enumerate(reference_captions(objects))
    ]
    return {
        "filepath": "images",
        "filename": filename,
        "imgid": imgid,
        "split": split,
        "sentids": [s["sentid"] for s in sentences],
        "sentences": sentences,
        "objects": objects,
    }


def _write_png(path, pixels):
    # zlib's fastest level: a noisy scene compresses little at any level (36 KB against
    # 33 KB at level 6), and level 6 took about 2x as long to write and read back.
    Image.fromarray(pixels).save(path, format="PNG", compress_level=1)


def describe_generator_settings(settings):
    """`generator_settings` in words, for a log line or an error."""
    varied = settings.get("varied")
    text = (
        f"{settings['train']}/{settings['val']}/{settings['test']} images, seed {settings['seed']}"
    )
    if not varied:
        return text
    text += f", {varied:g} of the training scenes varied"
    if settings.get("varied_copies"):
        text += " (as added copies)"
    pages, light = settings.get("varied_pages"), settings.get("varied_light")
    if pages is None or light is None:
        return text + " (pages and light not recorded)"
    low, high, band = pages
    return f"{text} (pages {low}-{high + band}; light falling off by up to {light:g})"


def stored_generator_settings(path):
    """The generator settings a Shapes dataset file records (None when it records none)."""
    with open(path, encoding="utf-8") as file:
        try:
            return json.load(file).get("generator")
        except ValueError:
            return None  # not JSON: the reader that follows names the problem
