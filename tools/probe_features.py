"""Linear probes of a workdir's feature cache: can a linear classifier read each Shapes
object's colour and shape from the features inside its box?

    python tools/probe_features.py runs/shapes_lite0 [runs/shapes_soft ...]

For every object of the training and validation scenes, the features of the grid cells
whose centres fall inside its box are averaged; a ridge-regression classifier (one-hot
targets, closed form) is fitted on the training objects and scored on the validation
ones. High accuracy means the frozen backbone carries the attribute; chance is 1/6 for
colour and 1/4 for shape.
"""

import json
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keras_saat.data.feature_cache.feature_cache import FeatureCache  # noqa: E402
from keras_saat.data.readers.karpathy import read_karpathy  # noqa: E402
from keras_saat.workdir import DATA_DIR, FEATURES_DIR  # noqa: E402


def object_vectors(workdir, split):
    dataset = read_karpathy(Path(workdir) / DATA_DIR / "dataset_shapes.json")
    records = dataset.split(split)
    cache = FeatureCache(Path(workdir) / FEATURES_DIR)
    h, w = cache.grid_shape
    ys, xs = (np.arange(h) + 0.5) * 128 / h, (np.arange(w) + 0.5) * 128 / w
    vectors, colours, shapes = [], [], []
    for example in cache.dataset(split):
        record = records[int(example["position"])]
        grid = example["features"].numpy().reshape(h, w, -1)
        for obj in record.objects:
            x0, y0, x1, y1 = obj["box"]
            inside = np.outer((ys >= y0) & (ys <= y1), (xs >= x0) & (xs <= x1))
            if not inside.any():  # a box smaller than a cell: its nearest cell
                inside[np.abs(ys - (y0 + y1) / 2).argmin(), np.abs(xs - (x0 + x1) / 2).argmin()] = (
                    True
                )
            vectors.append(grid[inside].mean(0))
            colours.append(obj["colour"])
            shapes.append(obj["shape"])
    return np.array(vectors, np.float64), colours, shapes


def probe(train_x, train_y, val_x, val_y, ridge=1.0):
    classes = sorted(set(train_y))
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - mean) / std, (val_x - mean) / std
    targets = np.eye(len(classes))[[classes.index(y) for y in train_y]]
    weights = np.linalg.solve(a.T @ a + ridge * len(a) * np.eye(a.shape[1]), a.T @ targets)
    predicted = [classes[i] for i in (b @ weights).argmax(1)]
    return float(np.mean([p == y for p, y in zip(predicted, val_y, strict=True)]))


def main():
    for workdir in sys.argv[1:]:
        config = yaml.safe_load((Path(workdir) / "config.yaml").read_text())
        train_x, train_c, train_s = object_vectors(workdir, "train")
        val_x, val_c, val_s = object_vectors(workdir, "val")
        print(
            json.dumps(
                {
                    "workdir": workdir,
                    "backbone": config["model"]["backbone"],
                    "image_size": config["model"]["image_size"],
                    "channels": int(train_x.shape[1]),
                    "objects": [len(train_x), len(val_x)],
                    "colour_accuracy": round(probe(train_x, train_c, val_x, val_c, 1e-3), 3),
                    "shape_accuracy": round(probe(train_x, train_s, val_x, val_s, 1e-3), 3),
                }
            )
        )


if __name__ == "__main__":
    main()
