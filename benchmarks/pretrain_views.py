"""The Shapes CNN's pre-training step on a CPU: the photometric views compiled by XLA
(`PhotometricViews`, as `attribute_trainer` builds them), run op by op, and left out.

    python -m benchmarks.pretrain_views [--scenes 1500] [--epochs 2] [--repeats 2] [--out FILE.json]

One process, oneDNN's kernels on (as `keras-saat train` and `demo` run), the demo's CNN
(`shapes_cnn_small_norm`) at the demo's batch (32) under Keras's `jit_compile="auto"` (no
XLA for the step on a CPU). Each variant builds a fresh trainer, runs one epoch that
holds the trace and compiles, then times EPOCHS more over SCENES rendered world scenes;
the variants alternate, which goes first swapping each repeat, so drift on a shared
machine falls on all. `ms_per_step` is the timed epochs' wall time over their steps.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # as keras-saat train runs
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.harness import benchmark_report  # noqa: E402
from benchmarks.harness.runner import machine  # noqa: E402
from keras_saat.data.shapes import render, sample_objects  # noqa: E402
from keras_saat.encoders.shapes_cnn import (  # noqa: E402
    ATTRIBUTE_HEADS,
    _scene_batches,
    attribute_targets,
    build_shapes_cnn,
)
from keras_saat.images.photometry import PhotometricViews  # noqa: E402

VARIANTS = ("compiled", "op by op", "none")


def trainer(variant, steps):
    """`attribute_trainer`'s model, the views compiled, op by op or absent."""
    keras.utils.set_random_seed(0)
    backbone = build_shapes_cnn((128, 128, 3), width=24, standardize=True)
    pixels = keras.Input((128, 128, 3))
    seen = pixels
    if variant != "none":
        seen = PhotometricViews(0, jit_compile=variant == "compiled")(pixels)
    features = backbone(seen)
    heads = {n: keras.layers.Conv2D(c, 1, name=n)(features) for n, c in ATTRIBUTE_HEADS.items()}
    model = keras.Model(pixels, heads)
    model.compile(
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(2e-3, steps)),
        loss={k: keras.losses.SparseCategoricalCrossentropy(from_logits=True) for k in heads},
    )
    return model


def measure(variant, images, targets, epochs):
    batches = _scene_batches(images, targets, 32, seed=0)
    steps = -(-len(images) // 32)
    model = trainer(variant, steps * (epochs + 1))
    start = time.perf_counter()
    model.fit(batches, epochs=1, verbose=0)
    first = time.perf_counter() - start
    start = time.perf_counter()
    model.fit(batches, epochs=epochs, verbose=0)
    seconds = time.perf_counter() - start
    return {"variant": variant, "first_epoch_s": first, "seconds": seconds,
            "steps": steps * epochs, "ms_per_step": 1000 * seconds / (steps * epochs)}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=int, default=1500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="write the rows here (JSON)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    objects = [sample_objects(rng) for _ in range(args.scenes)]
    images = np.stack([render(o, rng) for o in objects])
    targets = attribute_targets(objects, (8, 8), 128)
    rows = []
    for repeat in range(args.repeats):
        for variant in VARIANTS[:: 1 if repeat % 2 == 0 else -1]:
            rows.append(measure(variant, images, targets, args.epochs))
            print(json.dumps(rows[-1]), flush=True)
    where = machine()
    print(f"{where['cpu']} ({where['cpus']} cpus), {where['date']}, ms a step at batch 32:")
    for variant in VARIANTS:
        times = [f"{r['ms_per_step']:.1f}" for r in rows if r["variant"] == variant]
        print(f"  {variant}: {', '.join(times)}")
    benchmark_report("pretrain_views.py", {"rows": rows}, args.out)


if __name__ == "__main__":
    main()
