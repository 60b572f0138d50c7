"""Captions under shifted photometry: the same Shapes scenes rendered as a camera, a page
or a file would change them, each shift scored beside the in-distribution row.

Every shift renders the same objects (`sample_objects` from one seed), so a row differs
from the in-distribution row only by what its name says (`SHIFTS` lists them). BLEU-4 is
nltk's corpus BLEU on every row (`keras-saat evaluate`'s test scores use pycocoevalcap's
tokenisation, so its BLEU-4 differs a little), and the hit rate is
`attention_localisation`'s.
"""

import dataclasses

import numpy as np

from keras_saat.data.camera import as_jpeg, hand_drawn_sheet, photographed
from keras_saat.data.shapes import (
    BACKGROUND_MAX,
    IMAGE_SIZE,
    PREFIXES,
    SIZES,
    light_field,
    reference_captions,
    render,
    sample_objects,
)
from keras_saat.evaluation.bleu import corpus_bleu_scores
from keras_saat.evaluation.localisation import attention_localisation


@dataclasses.dataclass(frozen=True)
class Shift:
    """One way the scenes are changed: `name`, what it `changes`, and its rendering."""

    name: str
    changes: str
    background: tuple = (0, BACKGROUND_MAX)  # each background channel drawn from this range
    exposure: float = 0.0  # added to every pixel
    contrast: float = 1.0  # pixels -> mean + contrast * (pixels - mean)
    cast: tuple = (1.0, 1.0, 1.0)  # per-channel gains
    jpeg_quality: int = 0  # 0 = no JPEG round trip
    scale: float = 1.0  # rendered, then resized by this factor
    noise: float = 0.0  # Gaussian sigma added on top of the world's own
    light: float = 0.0  # the dimmest side or corner this much darker, in a random direction
    view: str = ""  # "rotated", "hand-drawn" or "photographed": `VIEWS`


SHIFTS = (
    Shift("in distribution", "nothing: the Shapes world as trained"),
    Shift("background 40-100", "background channels from [40, 100]", background=(40, 100)),
    Shift("background 100-180", "a grey page: background from [100, 180]", background=(100, 180)),
    Shift("background 160-220", "a light page: background from [160, 220]", background=(160, 220)),
    Shift("uneven light", "the light falls off across the picture, 30 % at its dimmest", light=0.3),
    Shift(
        "light page, uneven light",
        "a light page (background 160-220), its light 30 % less at its dimmest",
        background=(160, 220),
        light=0.3,
    ),
    Shift("exposure +40", "every pixel 40 brighter", exposure=40.0),
    Shift("contrast 0.6", "pixels pulled 40 % towards the mean", contrast=0.6),
    Shift("colour cast", "warm light: red x1.12, blue x0.85", cast=(1.12, 1.0, 0.85)),
    Shift("JPEG quality 30", "delivered as a JPEG at quality 30", jpeg_quality=30),
    Shift("half resolution", "rendered, then scaled to 64x64", scale=0.5),
    Shift("double resolution", "rendered, then scaled to 256x256", scale=2.0),
    Shift("noise sigma 20", "Gaussian noise sigma 18 on top of the world's 8", noise=18.0),
    Shift("rotated 5-8 degrees", "the scene turned by 5-8 degrees either way", view="rotated"),
    Shift(
        "hand-drawn",
        "wobbly outlines with a pen line, marker colours, a light page, a JPEG",
        view="hand-drawn",
    ),
    Shift(
        "photographed sheet",
        "a light page at 80-90 % of the frame on a table, turned up to 8 degrees, "
        "blurred, vignetted, a JPEG",
        view="photographed",
    ),
)


def _rotated(objects, rng):
    sheet = render(objects, rng)
    return photographed(sheet, objects, rng, scale=(1.0, 1.0), tilt=(5.0, 8.0), table=False)


def _hand_drawn(objects, rng):
    sheet, objects = hand_drawn_sheet(objects, rng)
    return as_jpeg(sheet, int(rng.integers(60, 91))), objects


def _photographed(objects, rng):
    level = int(rng.integers(160, 201))
    sheet = render(objects, rng, (level, level + 30))
    return photographed(sheet, objects, rng, scale=(0.8, 0.9))


# A view's name -> how it draws a scene: (objects, rng) -> (pixels, objects as drawn).
VIEWS = {"rotated": _rotated, "hand-drawn": _hand_drawn, "photographed": _photographed}


def plain_caption(caption):
    """`caption` without its opening words ("a picture of") and sizes: how
    `keras_saat.data.shapes.HAND_DRAWN` names a scene."""
    for prefix in sorted(PREFIXES, key=len, reverse=True):
        if prefix and caption.startswith(prefix):
            caption = caption[len(prefix) :]
            break
    return " ".join(word for word in caption.split() if word not in SIZES)


def shift_by_name(name):
    """The `SHIFTS` entry called `name`."""
    for shift in SHIFTS:
        if shift.name == name:
            return shift
    raise KeyError(f"unknown shift {name!r}: {', '.join(s.name for s in SHIFTS)}")


CHUNK = 256  # scenes rendered and decoded together: a bounded memory at any count


def render_shifted(scenes, shift, seed=0):
    """(N, S, S, 3) uint8 pixels of `scenes` under `shift`; `seed` (an int or a tuple of
    ints) picks the draws, the same for every shift."""
    return render_views(scenes, shift, seed)[0]


def render_views(scenes, shift, seed=0):
    """`render_shifted`'s pixels and the scenes' objects where the pixels show them (a
    view of `VIEWS` moves their boxes)."""
    import tensorflow as tf

    key = [int(k) for k in np.atleast_1d(seed)]  # an int, or a tuple of them
    rng = np.random.default_rng([*key, 1])
    noise_rng = np.random.default_rng([*key, 2])
    light_rng = np.random.default_rng([*key, 3])
    if shift.view:
        views = [VIEWS[shift.view](objects, rng) for objects in scenes]
        return np.stack([v[0] for v in views]), [v[1] for v in views]
    # Separate streams: the light fields drawn first leave the scenes' draws as they are.
    lights = [light_field(light_rng, shift.light) if shift.light else None for _ in scenes]
    pixels = np.stack(
        [render(o, rng, shift.background, f) for o, f in zip(scenes, lights, strict=True)]
    )
    image = pixels.astype(np.float32)
    if shift.contrast != 1.0:
        mean = image.mean(axis=(1, 2, 3), keepdims=True)
        image = mean + shift.contrast * (image - mean)
    image = image * np.asarray(shift.cast, np.float32) + shift.exposure
    if shift.noise:
        image = image + noise_rng.normal(0.0, shift.noise, image.shape).astype(np.float32)
    pixels = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    if shift.jpeg_quality:
        quality = shift.jpeg_quality
        pixels = np.stack(
            [tf.io.decode_jpeg(tf.io.encode_jpeg(p, quality=quality)).numpy() for p in pixels]
        )
    if shift.scale != 1.0:
        side = int(round(IMAGE_SIZE * shift.scale))
        resized = tf.image.resize(pixels, (side, side), method="bilinear", antialias=True)
        pixels = np.clip(np.rint(resized.numpy()), 0, 255).astype(np.uint8)
    return pixels, scenes


def robustness_scenes(count, seed=0):
    """`count` scenes (object lists) drawn from the world with `seed`'s own stream."""
    rng = np.random.default_rng([seed, 0])
    return [sample_objects(rng) for _ in range(count)]


def robustness_rows(model, count=200, seed=0, shifts=SHIFTS, batch_size=64, max_length=None,
                    resize="crop", log=print):  # fmt: skip
    """Each shift's BLEU-4 and attention hit rate on the same `count` scenes, greedy decoding.

    `model` is a Captioner trained on the Shapes world; `shifts` defaults to `SHIFTS` (its
    first row in distribution); `max_length` None is the model's; `resize` is how images of
    another size reach the model's (`resize_image`); `log` receives a line per shift.

    Returns:
        list of dict, one per shift: shift, changes, bleu_4, hit_rate, chance, bleu_4_change
        (against the first row).
    """
    from keras_saat.images.decoding import resize_image
    from keras_saat.models.batch_decoder import BatchDecoder

    scenes = robustness_scenes(count, seed)
    references = [[c.split() for c in reference_captions(o)] for o in scenes]
    decoder = BatchDecoder(model, batch_size, max_length or model.max_length, 1, 0.0)
    rows = []
    for shift in shifts:
        results, seen = [], []
        for start in range(0, count, CHUNK):
            pixels, shown = render_views(scenes[start : start + CHUNK], shift, (seed, start))
            if pixels.shape[1] != model.image_size:
                pixels = resize_image(pixels, model.image_size, resize).numpy()
            results += decoder(pixels=pixels)
            seen += shown
        words = [r["words"] for r in results]
        bleu = corpus_bleu_scores(references, words)["bleu_4"]
        local = attention_localisation(words, [r["attention"] for r in results], seen)
        change = bleu - rows[0]["bleu_4"] if rows else 0.0
        scores = {"bleu_4": bleu, "hit_rate": local["hit_rate"], "chance": local["chance"]}
        rows.append(
            {"shift": shift.name, "changes": shift.changes, **scores, "bleu_4_change": change}
        )
        log(f"  {shift.name:<20} BLEU-4 {bleu:.3f} ({change:+.3f})  hits {_hits(rows[-1])}")
    return rows


def robustness_table(rows):
    """The rows as a Markdown table (the performance page's and the command's)."""
    lines = [
        "| shift | what changes | BLEU-4 | change | attention hits |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['shift']} | {row['changes']} | {row['bleu_4']:.3f} | "
            f"{row['bleu_4_change']:+.3f} | {_hits(row)} |"
        )
    return "\n".join(lines)


def _hits(row):
    return "-" if row["hit_rate"] is None else f"{row['hit_rate']:.3f}"
