"""`python -m benchmarks`: speed and memory against this machine's limit, measured in one run.

Each row of a part runs in a fresh Python process, so its peak resident memory is its
own and no compiled function or cache carries over (`runner`). The parts, registered
in `parts` (a new one is a function and one registration):

    device    the GPU (name, compute capability) and whether the CPU computes bfloat16;
              it decides the precisions (float32, and bfloat16 where the hardware has
              it: `resolve_precision("auto")`) and the GPU or CPU plan below
    matmul    matmul throughput in each precision (the limit): the best of 10 timings
              and their median; n = 2048 on a CPU, 20 chained n = 8192 on a GPU
    train     train-step throughput against an analytic FLOP count (`train_step_flops`)
              and a matmul of the step's precision timed alongside: `train_plan`
              (CPU: both sizes, soft and hard, XLA on and off, every precision; GPU:
              XLA in every precision at batch 64 and 512, one row without XLA)
    batches   the batch/throughput curve: paper size, soft, best precision
    profile   where the train step's time goes (TensorFlow's profiler, `profiling`): on a
              CPU op time by op type per size and precision (which ops hold a precision
              back); on a GPU the paper size at batch 512 in the best precision with XLA,
              unrolled and in a loop: kernel time by kind of work, device busy share of
              the wall time, and launches a step
    input     captions/s the training input path delivers from a feature cache on disk
              at the paper size, per_caption and per_image batches, 64 and 512, with the
              features streamed through tf.data and resident on the device (gathered by
              index): compare with the train rows to see which one limits a run
    extract   feature extraction (read, decode, resize, backbone, write) against the
              bare backbone forward, EfficientNetB0 and VGG16, weights=None, per precision
    decode    greedy and beam-3 captions/s from features on the device (tutorial size),
              per precision (and batch 512 on a GPU), and feed_ms: what casting a
              NumPy float64 batch and copying it to the device would add to each call
    serving   the exported SavedModel (EfficientNetB0 at 224, beam 3) run by a TF1
              Session, as TF Serving runs it: one-JPEG latency and batch-32
              throughput; "serving" is the float32 export, "serving_bfloat16" the
              `--precision bfloat16` one
    hostile   each crafted input of docs/guides/hostile-input.md (`hostile`): its peak
              memory and time in a fresh process, and the answer it gets, beside a
              baseline process that imports TensorFlow and does nothing
    scale     the fixed work of a run at COCO's and CC3M's shape on a synthetic dataset of
              `--images N` images (default 10000): reading the captions file, the
              vocabulary, opening the cache, the token table, an epoch's fixed work;
              each phase's wall time and peak resident memory (`scale`)
    malloc    the soft train step at both sizes with glibc's malloc tuned and with its
              defaults (KERAS_SAAT_MALLOC=system), alternating fresh processes: step
              time, page faults a step and peak memory (keras_saat/runtime/memory.py)

Timings are medians over repeats after a warm-up. No test asserts on them: the
machines are shared and noisy, so compare ratios measured in one run.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.harness.parts import PARTS, Part, add_part  # noqa: E402
from benchmarks.harness.profiling import kind_of, op_times, step_profile  # noqa: E402
from benchmarks.harness.report import benchmark_report, run_all, write_report  # noqa: E402
from benchmarks.harness.runner import run_in_subprocess  # noqa: E402
from benchmarks.harness.sizes import SIZES, forward_flops, train_step_flops  # noqa: E402

__all__ = [
    "PARTS",
    "SIZES",
    "Part",
    "add_part",
    "benchmark_report",
    "forward_flops",
    "kind_of",
    "op_times",
    "run_all",
    "run_in_subprocess",
    "step_profile",
    "train_step_flops",
    "write_report",
]
