"""TensorFlow's own CPU kernels against oneDNN's, on the demo's two trainings.

    python -m benchmarks.onednn [ROUNDS] > rows.jsonl

Each row is a fresh process (TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import),
the two settings alternating, ROUNDS (default 3) of each:
- `cnn`: the Shapes CNN's attribute pre-training (`pretrain_shapes_cnn`'s model without
  its photometric layers, loss and optimizer, batch 32) through `fit()`, 40 batches after one warm-up epoch of 3;
  ms per image.
- `decoder`: the demo's decoder step (L = 64, C = 128, LSTM 256, batch 64, 16 steps of
  teacher forcing, no XLA, unrolled) through the trainer; ms per step.

`cores` is the process's CPU time over its wall time while timed: on a shared 2-core
machine a row near 1.0 ran on one core, so compare rows of similar `cores`.
"""

import json
import os
import resource
import subprocess
import sys
import time

DECODER = dict(
    backbone="shapes_cnn", locations=64, channels=128, feature_dim=128, embedding_dim=64,
    lstm_units=256, attention_units=128, vocab=35, length=16, batch=64,
)  # fmt: skip


def _clock():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime + usage.ru_stime


def _cnn(batches=40, batch_size=32):
    import keras
    import numpy as np

    from keras_saat.data.shapes import render, sample_objects
    from keras_saat.encoders.shapes_cnn import (
        ATTRIBUTE_HEADS,
        attribute_targets,
        attribute_trainer,
        build_shapes_cnn,
    )

    rng = np.random.default_rng(0)
    objects = [sample_objects(rng) for _ in range(batches * batch_size)]
    images = np.stack([render(o, rng) for o in objects]).astype(np.float32) / 255
    targets = attribute_targets(objects, (8, 8))
    keras.utils.set_random_seed(0)
    backbone = build_shapes_cnn()
    model = attribute_trainer(backbone, augment=False)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss={k: loss for k in ATTRIBUTE_HEADS})
    warm = 3 * batch_size
    model.fit(
        images[:warm], {k: v[:warm] for k, v in targets.items()}, batch_size=batch_size, verbose=0
    )
    start, cpu = _clock()
    model.fit(images, targets, batch_size=batch_size, shuffle=True, verbose=0)
    end, cpu_end = _clock()
    return {
        "ms_per_image": 1000 * (end - start) / len(images),
        "cores": (cpu_end - cpu) / (end - start),
    }


def _decoder(steps=30):
    import keras
    import tensorflow as tf

    from benchmarks.harness.sizes import captioner, random_batch
    from keras_saat.training.trainer import Trainer

    model = captioner(DECODER, "soft")
    trainer = Trainer(
        model, keras.optimizers.Adam(1e-4), clipnorm=5.0, jit_compile=False, log=lambda _: None
    )
    batch = {k: tf.constant(v) for k, v in random_batch(DECODER).items()}
    for _ in range(3):
        trainer.train_step(batch)["loss"].numpy()
    start, cpu = _clock()
    for _ in range(steps):
        trainer.train_step(batch)["loss"].numpy()
    end, cpu_end = _clock()
    return {"ms_per_step": 1000 * (end - start) / steps, "cores": (cpu_end - cpu) / (end - start)}


def _child(part):
    from keras_saat.runtime.cpu_kernels import onednn_enabled

    row = (_cnn if part == "cnn" else _decoder)()
    print(json.dumps({"part": part, "onednn": onednn_enabled(), **row}))


def main(rounds):
    for _ in range(rounds):
        for part in ("cnn", "decoder"):
            for setting in ("0", "1"):
                env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": setting, "TF_CPP_MIN_LOG_LEVEL": "3"}
                out = subprocess.run(
                    [sys.executable, __file__, "--child", part],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
