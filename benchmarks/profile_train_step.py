"""Where a train step's time goes: TensorFlow profiler op times, summed by op type.

    .venv/bin/python -m benchmarks.profile_train_step [--size paper] [--attention soft] [--xla]
        [--by name] [--precision bfloat16]

Traces two steps of the `keras-saat bench` train part with `tf.profiler.experimental`,
reads the xplane file it writes, and sums the `tf_Compute` thread events by op type (per
step). The events of the two inter-op threads overlap, so the sums are op time, not wall
time: use them to rank ops and compare runs, and the bench for captions/s. `--by name`
sums by op name with the unrolled loop's step numbers taken out, so the 20 copies of
one matmul of the step are one line.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_saat.bench import SIZES, op_times  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="paper", choices=sorted(SIZES))
    parser.add_argument("--attention", default="soft", choices=["soft", "hard"])
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--by", default="type", choices=["type", "name"])
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    totals = op_times(args.size, args.attention, args.xla, by=args.by, precision=args.precision)
    width = max((len(k) for k, _ in totals.most_common(args.top)), default=40)
    for key, ms in totals.most_common(args.top):
        print(f"{key:{width}s} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
