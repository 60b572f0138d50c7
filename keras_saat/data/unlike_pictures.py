"""Synthetic pictures with the statistics of natural images and nothing of a captioning world.

The familiarity signal learns one direction in feature space that leads away from the
training pictures towards pictures like these (`fit_familiarity`'s discriminant). No
photograph can be downloaded at run time, so the negatives are drawn from two models of
natural images' statistics:

- dead leaves (Matheron 1968; Lee, Mumford & Huang 2001): opaque discs of radii with a
  power-law density, each hiding those below it, which gives photographs' scale-invariant
  edges and flat patches;
- 1/f noise: random phases under a power spectrum falling as 1/f^a (a in [1.5, 3]), the
  spectrum of photographs' textures (grass, gravel, skin, cloud);

and a blend of the two, a third of each in black and white, and a quarter of all of them
as a thumbnail enlarged (8-32 pixels a side, scaled up): a small photograph, such as a
face cut from a larger one, reaches the CNN that smooth. The colours are drawn uniformly,
and the discs come by the hundred at every size, overlapping: never a page with a few
objects on it, as a captioning world's scenes are.
"""

import numpy as np
from PIL import Image

THUMBNAIL = (8, 32)  # a thumbnail's side in pixels, before it is enlarged


def power_law_noise(rng, size, exponent):
    """(size, size, 3) float pixels of 1/f^exponent noise, its channels correlated."""
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.fftfreq(size)[None]
    frequency = np.sqrt(fx**2 + fy**2)
    frequency[0, 0] = 1.0
    shared = rng.normal(size=(size, size)) + 1j * rng.normal(size=(size, size))
    channels = []
    for _ in range(3):
        own = rng.normal(size=(size, size)) + 1j * rng.normal(size=(size, size))
        image = np.real(np.fft.ifft2((0.7 * shared + 0.3 * own) / frequency ** (exponent / 2)))
        channels.append((image - image.mean()) / (image.std() + 1e-9))
    return np.stack(channels, -1) * rng.uniform(20, 60) + rng.uniform(60, 190, size=3)


def dead_leaves(rng, size):
    """(size, size, 3) float pixels: discs of radius r with density ~ r^-3, from 2 px."""
    from PIL import ImageDraw

    image = Image.new("RGB", (size, size), tuple(int(c) for c in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(60, 400))):
        radius = min(2.0 * (1.0 - rng.random()) ** -0.5, float(size))
        cy, cx = rng.uniform(-radius, size + radius, 2)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=colour)
    return np.asarray(image, np.float64)


def unlike_pictures(count, size=128, seed=0):
    """`count` (size, size, 3) uint8 pictures: dead leaves, 1/f noise and their blend in
    turn, every third triple grey, every fourth picture a thumbnail enlarged.

    Args:
        count: int.
        size: int. Side in pixels. Defaults to 128.
        seed: int. Defaults to 0.

    Returns:
        np.ndarray: (count, size, size, 3) uint8.
    """
    rng = np.random.default_rng(seed)
    pictures = np.empty((count, size, size, 3), np.uint8)
    for index in range(count):
        kind = index % 3
        if kind == 0:
            image = dead_leaves(rng, size)
        elif kind == 1:
            image = power_law_noise(rng, size, rng.uniform(1.5, 3.0))
        else:
            image = 0.5 * dead_leaves(rng, size) + 0.5 * power_law_noise(
                rng, size, rng.uniform(1.5, 3.0)
            )
        if (index // 3) % 3 == 2:  # a third in black and white, as many photographs are
            image = np.repeat(image @ np.array([[0.299], [0.587], [0.114]]), 3, axis=-1)
        pictures[index] = np.clip(np.rint(image), 0, 255)
        if index % 4 == 3:
            pictures[index] = enlarged_thumbnail(
                pictures[index], min(int(rng.integers(*THUMBNAIL, endpoint=True)), size)
            )
    return pictures


def enlarged_thumbnail(picture, side):
    """(S, S, 3) uint8 `picture` shrunk to `side` pixels a side, then scaled back to S."""
    size = picture.shape[0]
    bilinear = Image.Resampling.BILINEAR
    small = Image.fromarray(picture).resize((side, side), bilinear)
    return np.asarray(small.resize((size, size), bilinear))
