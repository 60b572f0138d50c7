"""The backbone over a batch in chunks (`ImageEncoder.infer`, `export.encoder_chunk`)
against the whole batch in one call, with TensorFlow's own CPU kernels and with oneDNN's.

    python -m benchmarks.encoder_chunk [--backbone efficientnetb0] [--batch 32]
        [--chunks 0,2,4,8] [--rounds 5] [--out FILE.json]

Each kernel setting is a fresh process (TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at
import). In it: the backbone with random weights at its default image size, a batch of
BATCH images, `encoder.infer(pixels, chunk)` in a `tf.function` for each chunk size
(0 = the whole batch; else chunks of that many images, two at a time, as the export
runs them), one warm-up call each, then ROUNDS rounds with the chunk sizes in turn. The
rows are ms a batch (the median of the rounds, and the fastest) and each size's speed
against the whole batch's. The `default` field is the chunk the export picks for that
setting (`default_inference_chunk`).
"""

import argparse
import json
import os
import subprocess
import sys


def _child(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import time

    import numpy as np
    import tensorflow as tf

    from keras_saat.encoders import ImageEncoder
    from keras_saat.encoders.image_encoder import default_inference_chunk

    tf.keras.utils.set_random_seed(0)
    encoder = ImageEncoder(args.backbone, None, None)
    size = encoder.image_size
    pixels = tf.constant(
        np.random.default_rng(0).uniform(0, 255, (args.batch, size, size, 3)), tf.float32
    )
    chunks = [int(c) for c in args.chunks.split(",")]
    runs = {c: tf.function(lambda x, c=c: encoder.infer(x, c)) for c in chunks}
    for c in chunks:
        runs[c](pixels).numpy()  # trace and warm up
    times = {c: [] for c in chunks}
    for _ in range(args.rounds):
        for c in chunks:
            start = time.perf_counter()
            runs[c](pixels).numpy()
            times[c].append(1000 * (time.perf_counter() - start))
    whole = float(np.median(times[0])) if 0 in times else None
    rows = [
        {
            "chunk": c,
            "ms_median": round(float(np.median(t)), 1),
            "ms_min": round(min(t), 1),
            "speed_vs_whole_batch": round(whole / float(np.median(t)), 2) if whole else None,
        }
        for c, t in times.items()
    ]
    print(json.dumps({"image_size": size, "default": default_inference_chunk(), "rows": rows}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="efficientnetb0")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--chunks", default="0,2,4,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="write the report here (JSON)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    from benchmarks.harness import benchmark_report

    settings = {}
    for onednn in ("0", "1"):
        command = [sys.executable, __file__, "--child", *sys.argv[1:]]
        if "--out" in command:  # the parent writes the report
            at = command.index("--out")
            del command[at : at + 2]
        env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        settings[f"TF_ENABLE_ONEDNN_OPTS={onednn}"] = json.loads(done.stdout.splitlines()[-1])
    benchmark_report(
        "encoder_chunk.py",
        {
            "backbone": args.backbone,
            "batch": args.batch,
            "rounds": args.rounds,
            "weights": "random (speed only)",
            "settings": settings,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
