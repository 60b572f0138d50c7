"""Attention localisation on the Shapes world: does the model look at what it names?

Each object phrase ("a [size] colour shape") of a caption that matches a ground-truth
object is scored at its colour and shape words: a hit when the centre of the attention's
argmax cell lies in the object's box dilated by half a cell (either of two identical
objects counts). Unmatched phrases are caption errors, left to BLEU. `chance` is the hit
rate of a uniformly random cell over the same words.
"""

import numpy as np

from keras_saat.data.shapes import COLOURS, IMAGE_SIZE, SHAPES, SIZES


def object_phrases(words):
    """[(colour word index, shape word index, {"colour", "shape", "size"}), ...] in a caption."""
    phrases = []
    for i, word in enumerate(words):
        if word != "a":
            continue
        j, size = i + 1, None
        if j < len(words) and words[j] in SIZES:
            size, j = words[j], j + 1
        if j + 1 < len(words) and words[j] in COLOURS and words[j + 1] in SHAPES:
            phrases.append((j, j + 1, {"colour": words[j], "shape": words[j + 1], "size": size}))
    return phrases


def _cell_centres(grid_shape, image_size):
    gh, gw = grid_shape
    ys = (np.arange(gh) + 0.5) * image_size / gh
    xs = (np.arange(gw) + 0.5) * image_size / gw
    return np.stack(np.meshgrid(ys, xs, indexing="ij"), -1)  # (gh, gw, 2) as (y, x)


def _inside(points, box, margin):
    (x0, y0, x1, y1), (my, mx) = box, margin
    y, x = points[..., 0], points[..., 1]
    return (x >= x0 - mx) & (x <= x1 + mx) & (y >= y0 - my) & (y <= y1 + my)


def attention_localisation(captions, attentions, objects, image_size=IMAGE_SIZE):
    """Hit rate of the attention on colour and shape words of correctly named objects.

    Args:
        captions: list of word lists, one per image (the <end> token excluded).
        attentions: list of (T, grid_h, grid_w) arrays; step t produced word t.
        objects: list of ground-truth object lists (each with "colour", "shape", "size", "box").
        image_size: int. Side of the (square) images the boxes refer to. Defaults to 128.

    Returns:
        dict: hit_rate (0-1, None when no word was scored), chance (0-1), words (scored),
        phrases (object phrases that matched a ground-truth object), unmatched (phrases that
        did not).
    """
    hits, chance, words, matched, unmatched = 0, 0.0, 0, 0, 0
    for caption, alpha, scene in zip(captions, attentions, objects, strict=True):
        alpha = np.asarray(alpha)
        grid = alpha.shape[1:]
        centres = _cell_centres(grid, image_size)
        margin = (image_size / grid[0] / 2, image_size / grid[1] / 2)
        for colour_at, shape_at, phrase in object_phrases(caption):
            targets = [
                o
                for o in scene
                if o["colour"] == phrase["colour"]
                and o["shape"] == phrase["shape"]
                and (phrase["size"] is None or o["size"] == phrase["size"])
            ]
            if not targets:
                unmatched += 1
                continue
            matched += 1
            inside = np.zeros(grid, bool)
            for target in targets:
                inside |= _inside(centres, target["box"], margin)
            for step in (colour_at, shape_at):
                if step >= len(alpha):
                    continue
                cell = np.unravel_index(np.argmax(alpha[step]), grid)
                hits += int(inside[cell])
                chance += float(inside.mean())
                words += 1
    return {
        "hit_rate": hits / words if words else None,
        "chance": chance / words if words else None,
        "words": words,
        "phrases": matched,
        "unmatched": unmatched,
    }
