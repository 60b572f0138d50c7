"""How well a packaged Shapes CNN reads a scene under the views a reader makes of it: the
per-location accuracy of its pre-training heads (shape, colour, size, row, col) on the
robustness rows' pictures (in distribution, rotated, hand-drawn, photographed sheet),
and the shape accuracy split by the object's colour and size, which says where a view
loses the decoder its words.

    python -m benchmarks.cnn_views [--commit REV] [--scenes 300] [--out FILE.json]

`--commit` reads the packaged weights and record as they were at that git revision (to
set a change's CNN beside the one before it); without it, the working tree's. The scenes
are `robustness_scenes(N, seed=11)` (N = --scenes), drawn apart from the evaluation's seed 0.
"""

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_report

BACKBONE = "shapes_cnn_small_norm"  # the demo's
VIEWS = ("in distribution", "rotated 5-8 degrees", "hand-drawn", "photographed sheet")
ROOT = Path(__file__).resolve().parents[1]


def packaged(commit, scratch):
    """(weights path, record) of the packaged CNN, at `commit` or in the working tree."""
    from keras_saat.encoders.packaged_shapes_cnn import packaged_files

    weights, record = packaged_files(BACKBONE)
    if commit is None:
        return weights, json.loads(record.read_text())
    show = lambda path: subprocess.run(  # noqa: E731
        ["git", "show", f"{commit}:{path.relative_to(ROOT)}"], cwd=ROOT, capture_output=True,
        check=True,
    ).stdout  # fmt: skip
    old = Path(scratch) / weights.name
    old.write_bytes(show(weights))
    return old, json.loads(show(record))


def shape_accuracy_by(trainer, pixels, objects):
    """Shape accuracy on object locations per colour and per size of the object there."""
    from keras_saat.data.shapes import COLOURS, SIZES
    from keras_saat.encoders.shapes_cnn import attribute_targets

    shape = trainer.predict(pixels.astype(np.float32) / 255, verbose=0)["shape"].argmax(-1)
    targets = attribute_targets(objects, shape.shape[1:3], pixels.shape[1])
    right = shape == targets["shape"]
    split = {}
    for head, names in (("colour", COLOURS), ("size", SIZES)):
        for index, name in enumerate(names, start=1):
            where = targets[head] == index
            split[f"shape | {name}"] = float(right[where].mean()) if where.any() else None
    return split


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", help="a git revision whose packaged CNN to read")
    parser.add_argument("--scenes", type=int, default=300)
    parser.add_argument("--out", help="where to write the JSON report")
    args = parser.parse_args(argv)

    from keras_saat.encoders.packaged_shapes_cnn import load_packaged
    from keras_saat.encoders.shapes_cnn import attribute_accuracy
    from keras_saat.evaluation.robustness import SHIFTS, render_views, robustness_scenes

    with tempfile.TemporaryDirectory() as scratch:
        weights, record = packaged(args.commit, scratch)
        _, trainer = load_packaged(BACKBONE, weights, record)
    scenes = robustness_scenes(args.scenes, seed=11)
    rows = []
    for shift in (s for s in SHIFTS if s.name in VIEWS):
        pixels, objects = render_views(scenes, shift, seed=11)
        row = {"view": shift.name, **attribute_accuracy(trainer, pixels, objects)}
        row.update(shape_accuracy_by(trainer, pixels, objects))
        rows.append(row)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
    fields = {
        "commit": args.commit or "working tree",
        "pretraining": record["pretraining"],
        "scenes": args.scenes,
        "rows": rows,
    }
    benchmark_report("cnn_views.py", fields, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
