"""Where the Shapes CNN's pre-training spends its time: rendering the extra scenes, the input
pipeline (gather and scale) and the photometric augmentation each on its own (the latter
traced and XLA-compiled), and whole pre-training epochs at the recipe's batch and at a
larger one, with and without the augmentation, with Keras's `jit_compile` "auto" (XLA on
a GPU, not on a CPU) and True.

    python -m benchmarks.gpu.pretrain OUT.jsonl [SCENES] [EPOCHS]

SCENES (default 6000, the recipes' 2,000 training scenes and 4,000 extra ones) and EPOCHS
(default 1; 0 skips the pre-training rows) size the runs; on a CPU, smaller ones check the
script. One JSON row a
measurement, appended as it finishes: `row`, `seconds`, and per row what it counted.
The fit rows time `pretrain_shapes_cnn` itself (its first epoch includes the trace and
compile, which `first_epoch_s` and `later_epochs_s` separate when EPOCHS > 1).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.harness.runner import machine
from keras_saat.data.shapes import page_scene, render, sample_objects
from keras_saat.encoders.shapes_cnn import _scene_batches, attribute_targets, pretrain_shapes_cnn
from keras_saat.images.photometry import photometric_augmentation

out = Path(sys.argv[1])
scenes = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 1
gpu = bool(tf.config.list_physical_devices("GPU"))
out.parent.mkdir(parents=True, exist_ok=True)


def write(row):
    row = {**row, "device": "GPU" if gpu else "CPU", "machine": machine()}
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


rng = np.random.default_rng(0)
objects = [sample_objects(rng) for _ in range(scenes)]
start = time.perf_counter()
world = np.stack([render(o, rng) for o in objects[: scenes // 3]])
world_s = time.perf_counter() - start
start = time.perf_counter()
pages = np.stack([page_scene(o, rng) for o in objects[scenes // 3 :]])
pages_s = time.perf_counter() - start
write({"row": "render, world scenes", "scenes": len(world), "seconds": world_s})
write({"row": "render, page scenes", "scenes": len(pages), "seconds": pages_s})
images = np.concatenate([world, pages])
targets = attribute_targets(objects, (8, 8), 128)

for batch in (32, 128):
    batches = _scene_batches(images, targets, batch, seed=0)
    start = time.perf_counter()
    count = sum(1 for _ in batches)
    seconds = time.perf_counter() - start
    write(
        {
            "row": f"input pipeline alone, batch {batch}",
            "batches": count,
            "seconds": seconds,
            "ms_per_batch": 1000 * seconds / count,
        }
    )

augmentation = photometric_augmentation(0)
pixels = tf.constant(images[:32].astype(np.float32) / 255)
for xla in (False, True):
    augment = tf.function(lambda b: augmentation(b, training=True), jit_compile=xla)
    augment(pixels)
    start = time.perf_counter()
    for _ in range(10):
        augment(pixels).numpy()
    write(
        {
            "row": f"photometric augmentation alone, batch 32, {'XLA' if xla else 'tf.function'}",
            "ms_per_batch": 100 * (time.perf_counter() - start),
        }
    )

val = np.stack([render(o, rng) for o in objects[:200]])
for batch, augment, jit in (
    ()
    if not epochs
    else (
        (32, True, "auto"),
        (32, True, True),
        (32, False, "auto"),
        (128, True, "auto"),
    )
):
    marks = []

    def log(line, marks=marks):
        marks.append(time.perf_counter())

    start = time.perf_counter()
    _, accuracy = pretrain_shapes_cnn(
        images,
        objects,
        val_images=val,
        val_objects=objects[:200],
        epochs=epochs,
        batch_size=batch,
        augment=augment,
        jit_compile=jit,
        width=32,
        log=log,
    )
    seconds = time.perf_counter() - start
    row = {
        "row": f"pre-training, batch {batch}, augment {augment}, jit_compile {jit}",
        "scenes": len(images),
        "epochs": epochs,
        "seconds": seconds,
        "val_accuracy": accuracy,
    }
    if len(marks) > 1:
        row["first_epoch_s"] = marks[0] - start
        row["later_epochs_s"] = (marks[-1] - marks[0]) / (len(marks) - 1)
    write(row)
