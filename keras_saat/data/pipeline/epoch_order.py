"""An epoch's batches as a NumPy function of its seed: which captions make which batch.

The split's shards go in a seeded order, in windows of at least `window` units
(captions, or per-image groups); each window's units are permuted and cut into batches
(per length bucket when bucketing). A batch never spans two windows, so the cache path
reads a window's shards once. Batch `s` is row `s` of these arrays, so a run resumed at
step `s` neither builds nor reads the batches before it.
"""

import numpy as np

# Bucket i holds token lengths below BUCKET_LIMITS[i] + 1, padded to BUCKET_LIMITS[i].
BUCKET_LIMITS = (8, 11, 14, 17, 20, 25, 30)


def bucket_limits(width):
    """The padded token widths of the length buckets for batches `width` tokens wide."""
    return np.asarray(sorted({b for b in BUCKET_LIMITS if b < width} | {width}), np.int32)


def _units(positions, row_splits, per_image):
    """Units of the images at `positions`: their positions (n,) and token rows, (n,) flat rows
    (a caption each) or (n, per_image) with -1 past an image's last caption (a group each)."""
    starts, ends = row_splits[positions], row_splits[positions + 1]
    counts = ends - starts
    if per_image:
        counts = -(-counts // per_image)
    unit_positions = np.repeat(positions, counts)
    offsets = np.arange(len(unit_positions)) - np.repeat(np.cumsum(counts) - counts, counts)
    first = np.repeat(starts, counts) + offsets * (per_image or 1)
    if not per_image:
        return unit_positions, first
    rows = first[:, None] + np.arange(per_image)[None, :]
    return unit_positions, np.where(rows < np.repeat(ends, counts)[:, None], rows, -1)


def _cut(order, batch_size, drop_remainder, buckets=None):
    """Batches of a window's permuted units: (b, batch_size) unit indices, -1 past a partial
    batch's end, and each batch's bucket (-1 when not bucketing); partial batches last."""
    labels = np.full(len(order), -1) if buckets is None else buckets[order]
    batches, keys, kinds = [], [], []
    for label in np.unique(labels):
        ranks = np.flatnonzero(labels == label)  # places in the window's order
        full = len(ranks) // batch_size
        chunks = ranks[: full * batch_size].reshape(full, batch_size)
        batches.append(order[chunks])
        keys.append(chunks[:, -1] if full else np.zeros(0, np.int64))
        kinds.append(np.full(full, label))
        rest = ranks[full * batch_size :]
        if len(rest) and not drop_remainder:
            padded = np.pad(order[rest], (0, batch_size - len(rest)), constant_values=-1)
            batches.append(padded[None])
            keys.append(np.asarray([len(order) + label + 1]))
            kinds.append(np.asarray([label]))
    if not batches:
        return np.zeros((0, batch_size), np.int64), np.zeros(0, np.int64)
    batches, keys, kinds = np.concatenate(batches), np.concatenate(keys), np.concatenate(kinds)
    first = np.argsort(keys, kind="stable")
    return batches[first], kinds[first]


def _windows(shard_units, window):
    """Shard numbers grouped into windows of at least `window` units, in the order given."""
    windows, current, units = [], [], 0
    for shard, count in shard_units:
        current.append(shard)
        units += count
        if units >= window:
            windows.append(current)
            current, units = [], 0
    if current:
        windows.append(current)
    return windows


def epoch_plan(
    shard_positions,
    row_splits,
    batch_size,
    seed,
    window,
    per_image=None,
    lengths=None,
    width=None,
    drop_remainder=True,
    shuffle=True,
):
    """The batches of one epoch, in order.

    Args:
        shard_positions: list of int arrays. Each shard's image positions in its order
            (image files: one "shard" of every position).
        row_splits: int array (N + 1,). The token table's row splits: image p's captions
            are flat rows row_splits[p] .. row_splits[p + 1] - 1.
        batch_size: int. Units a batch.
        seed: int or None. The epoch's seed (None: a fresh order).
        window: int. Units shuffled together (at least; whole shards).
        per_image: int or None. Units are groups of this many caption rows of one image,
            or single captions when None. Defaults to None.
        lengths: int array or None. Each flat row's token count; each batch then holds
            one length bucket (`bucket_limits(width)`). Defaults to None.
        width: int or None. The token table's width (with `lengths`). Defaults to None.
        drop_remainder: bool. Drop each window's (bucket's) last partial batch, else pad
            it with -1. Defaults to True.
        shuffle: bool. Seeded shard and unit orders, or the cache's order. Defaults to True.

    Returns:
        dict of int32 arrays, one row a batch: "positions" (S, B) (-1: padding), "rows"
        (S, B) or (S, B, per_image) flat token rows (-1: none), "sizes" (S,) units,
        "widths" (S,) token widths, "windows" (S,); and "window_shards", a list of each
        window's shard numbers.
    """
    row_splits = np.asarray(row_splits, np.int64)
    rng = np.random.default_rng(seed)
    units = [_units(np.asarray(p, np.int64), row_splits, per_image) for p in shard_positions]
    shard_order = rng.permutation(len(units)) if shuffle else np.arange(len(units))
    windows = _windows([(int(s), len(units[s][0])) for s in shard_order], max(window, 1))
    limits = None if lengths is None else bucket_limits(width)
    out = {k: [] for k in ("positions", "rows", "sizes", "widths", "windows")}
    for number, members in enumerate(windows):
        positions = np.concatenate([np.zeros(0, np.int64), *(units[s][0] for s in members)])
        rows = np.concatenate([units[s][1] for s in members]) if members else None
        order = rng.permutation(len(positions)) if shuffle else np.arange(len(positions))
        buckets = None
        if limits is not None:
            buckets = np.searchsorted(limits, np.asarray(lengths)[rows], side="left")
        batches, kinds = _cut(order, batch_size, drop_remainder, buckets)
        valid = batches >= 0
        safe = np.maximum(batches, 0)
        out["positions"].append(np.where(valid, positions[safe], -1))
        mask = valid if per_image is None else valid[..., None]
        out["rows"].append(np.where(mask, rows[safe], -1))
        out["sizes"].append(valid.sum(axis=1))
        out["widths"].append(np.full(len(batches), width or 0) if limits is None else limits[kinds])
        out["windows"].append(np.full(len(batches), number))
    empty = {
        "positions": np.zeros((0, batch_size)),
        "rows": np.zeros((0, batch_size) if per_image is None else (0, batch_size, per_image)),
    }
    plan = {k: np.concatenate([empty.get(k, np.zeros(0)), *v]) for k, v in out.items()}
    plan = {k: v.astype(np.int32) for k, v in plan.items()}
    return {**plan, "window_shards": [np.asarray(w, np.int32) for w in windows]}


def from_step(plan, step):
    """The plan's batches from batch `step` on (a resumed epoch), rows sliced."""
    return {k: (v if k == "window_shards" else v[step:]) for k, v in plan.items()}
