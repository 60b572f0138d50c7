"""Where a train step's time goes: TensorFlow profiler op times, summed by op type.

    .venv/bin/python -m benchmarks.profile_train_step [--size paper] [--attention soft] [--xla]
        [--by name]

Traces two steps of the `keras-saat bench` train part with `tf.profiler.experimental`,
reads the xplane file it writes, and sums the `tf_Compute` thread events by op type (per
step). The events of the two inter-op threads overlap, so the sums are op time, not wall
time: use them to rank ops and compare runs, and the bench for captions/s. `--by name`
sums by op name with the unrolled loop's step numbers taken out, so the 20 copies of
one matmul of the step are one line.
"""

import argparse
import collections
import glob
import os
import re
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from keras_saat.bench import SIZES, _captioner, _random_batch  # noqa: E402
from keras_saat.training.trainer import Trainer  # noqa: E402


def _key(name, by):
    if by == "type":
        return name.split(":")[-1]
    return re.sub(r"_\d+(?=/|:|$)", "", name)  # "while/MatMul_13:MatMul" -> "while/MatMul:MatMul"


def op_times(size_name, attention, xla, steps=2, by="type"):
    model = _captioner(SIZES[size_name], attention)
    trainer = Trainer(
        model, keras.optimizers.Adam(1e-4), clipnorm=5.0, jit_compile=xla, log=lambda _: None
    )
    batch = {k: tf.constant(v) for k, v in _random_batch(SIZES[size_name]).items()}
    for _ in range(2):
        trainer.train_step(batch)["loss"].numpy()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            trainer.train_step(batch)["loss"].numpy()
        tf.profiler.experimental.stop()
        path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
    totals = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if line.name.startswith("tf_Compute"):
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    totals[_key(name, by)] += event.duration_ps / 1e9 / steps
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="paper", choices=sorted(SIZES))
    parser.add_argument("--attention", default="soft", choices=["soft", "hard"])
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--by", default="type", choices=["type", "name"])
    args = parser.parse_args()
    totals = op_times(args.size, args.attention, args.xla, by=args.by)
    width = max((len(k) for k, _ in totals.most_common(args.top)), default=40)
    for key, ms in totals.most_common(args.top):
        print(f"{key:{width}s} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
