"""Where a train step's time goes: TensorFlow profiler op or kernel times.

    .venv/bin/python -m benchmarks.profile_train_step [--size paper] [--attention soft] [--xla]
        [--by name] [--precision bfloat16]
    .venv/bin/python -m benchmarks.profile_train_step --kinds [--size paper] [--batch 512]
        [--xla] [--loop] [--precision bfloat16]

The first form traces two steps of the `python -m benchmarks` train part with
`tf.profiler.experimental` and sums the host's `tf_Compute` thread events by op type (per
step). The events of the two inter-op threads overlap, so the sums are op time, not wall
time: use them to rank ops and compare runs, and the bench for captions/s. `--by name`
sums by op name with the unrolled loop's step numbers taken out, so the 20 copies of one
matmul of the step are one line.

`--kinds` is the bench's profile part (`benchmarks.harness.profiling.step_profile`): the
step's wall time, and on a GPU its kernels (the streams' events) by kind of work, the
device's busy share and the launches a step; on a CPU the op times by kind.
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.harness import SIZES, op_times, step_profile  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="paper", choices=sorted(SIZES))
    parser.add_argument("--attention", default="soft", choices=["soft", "hard"])
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--by", default="type", choices=["type", "name"])
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--kinds", action="store_true", help="the bench's step profile")
    parser.add_argument("--batch", type=int, default=None, help="with --kinds")
    parser.add_argument("--loop", action="store_true", help="with --kinds: train.unroll false")
    args = parser.parse_args()
    if args.kinds:
        row = step_profile(
            args.size, args.precision, args.batch, args.xla, not args.loop, top=args.top
        )
        print(json.dumps(row, indent=1))
        return
    totals = op_times(args.size, args.attention, args.xla, by=args.by, precision=args.precision)
    width = max((len(k) for k, _ in totals.most_common(args.top)), default=40)
    for key, ms in totals.most_common(args.top):
        print(f"{key:{width}s} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
