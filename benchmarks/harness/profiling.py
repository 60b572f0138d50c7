"""Where a train step's time goes: TensorFlow's profiler around a few steps, its events
summed by op (host threads) or by kernel (a GPU's streams), and grouped into kinds of
work (matmuls, elementwise work, reductions and softmax, gathers and slices, copies,
the optimiser).

On a GPU the kernels of the streams are the step's device time: `busy_ms` against the
step's wall time shows what the device waits for (launches, the host), `kernels` how
many launches a step makes. On a CPU without XLA the inter-op threads' op events
overlap, so their sums are op time, not wall time: use them to rank and compare.
"""

import collections
import glob
import re
import tempfile
import time
from pathlib import Path

from benchmarks.harness.runner import median
from benchmarks.harness.sizes import SIZES, train_setup

# Kinds of work: patterns tried in order on the lower-cased op type or kernel name (XLA's
# GPU kernels are named after their fusion: "loop_multiply_fusion", "input_reduce_fusion").
KINDS = (
    ("matmul", r"matmul|gemm|cublas|cutlass|xmma|nvjet|einsum|dot|conv"),
    ("optimizer", r"apply(adam|rmsprop|gradient)|assign(add|sub)"),
    ("gathers, scatters and slices", r"gather|scatter|segment|dynamic|slice"),
    ("softmax and reductions", r"softmax|reduce|logsumexp|argm|^(sum|mean|max|min|prod|all|any)$"),
    ("copies and transposes", r"memcpy|memset|copy|transpose|concat|pad|pack|reshape|identity"),
    ("elementwise", (
        r"fusion|add|mul|sub|tanh|sigmoid|relu|exp|log|cast|select|where|div|sqrt|neg|"
        r"square|maximum|minimum|greater|less|equal|bias|fill|zeros|ones"
    )),
)  # fmt: skip


def kind_of(name):
    """The kind of work an op type ("BatchMatMulV2") or a GPU kernel name
    ("sm90_xmma_gemm_bf16...", "loop_multiply_fusion") does; "other" if none matches."""
    lowered = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other"


def _op_key(name, by):
    if by == "type":
        return name.split(":")[-1]
    return re.sub(r"_\d+(?=/|:|$)", "", name)  # "while/MatMul_13:MatMul" -> "while/MatMul:MatMul"


def _trainer(size, attention, xla, precision, unroll=True, fused=None):
    """`train_setup`'s trainer and batch, traced, compiled and warmed up."""
    trainer, batch = train_setup(size, attention, xla, precision, unroll, fused=fused)
    for _ in range(2):
        trainer.train_step(batch)["loss"].numpy()
    return trainer, batch


def profiled_events(trainer, batch, steps):
    """{"host": [(op name, ps)], "device": [(kernel name, ps)]} of `steps` train steps:
    the host's `tf_Compute` thread op events ("name:type"; the executor's enclosing
    "ExecutorState::Process" and "ParallelFor" events left out) and the GPU streams'
    kernel events."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            trainer.train_step(batch)["loss"].numpy()
        tf.profiler.experimental.stop()
        path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
        space = xplane_pb2.XSpace()
        space.ParseFromString(Path(path).read_bytes())
    events = {"host": [], "device": []}
    for plane in space.planes:
        gpu = plane.name.startswith("/device:GPU")
        for line in plane.lines:
            if gpu and line.name.startswith("Stream"):
                kind = "device"
            elif not gpu and line.name.startswith("tf_Compute"):
                kind = "host"
            else:
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if kind == "host" and (":" not in name or "::" in name):
                    continue  # the executor's own events enclose the ops
                events[kind].append((name, event.duration_ps))
    return events


def op_times(size_name, attention="soft", xla=False, steps=2, by="type", precision="float32"):
    """The train step's op time in ms a step, by op type (or by op name with the unrolled
    loop's step numbers taken out: `by="name"`), from the host's `tf_Compute` threads
    (`benchmarks/profile_train_step.py` prints them)."""
    trainer, batch = _trainer(SIZES[size_name], attention, xla, precision)
    totals = collections.Counter()
    for name, ps in profiled_events(trainer, batch, steps)["host"]:
        totals[_op_key(name, by)] += ps / 1e9 / steps
    return totals


def step_profile(
    size_name, precision="float32", batch=None, xla=False, unroll=True, steps=3, top=12,
    fused=None,
):  # fmt: skip
    """Where one train step's time goes (soft attention), on the device that runs it;
    `fused` is the Trainer's `fused_scores`.

    Returns a dict: wall_ms (median step without the profiler), where ("gpu" kernels or
    "host" ops), busy_ms (their time a step), busy_fraction (busy_ms / wall_ms, GPU),
    kernels (events a step: a GPU's launches), kinds_ms (`kind_of` sums) and top_ms
    (the largest ops or kernels, by op type or kernel name).
    """
    size = dict(SIZES[size_name], batch=batch or SIZES[size_name]["batch"])
    trainer, data = _trainer(size, "soft", xla, precision, unroll, fused)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        trainer.train_step(data)["loss"].numpy()
        times.append(time.perf_counter() - start)
    events = profiled_events(trainer, data, steps)
    where = "gpu" if events["device"] else "host"
    kinds, names = collections.Counter(), collections.Counter()
    for name, ps in events["device"] or events["host"]:
        key = name if where == "gpu" else _op_key(name, "type")
        names[key] += ps / 1e9 / steps
        kinds[kind_of(key)] += ps / 1e9 / steps
    wall = 1000 * median(times)
    busy = sum(kinds.values())
    return {
        "size": size_name,
        "precision": precision,
        "batch": size["batch"],
        "xla": bool(trainer.jit_compile),
        "unroll": trainer.unroll,
        "fused_scores": bool(trainer.model.decoder.fused_scores),
        "wall_ms": wall,
        "where": where,
        "busy_ms": busy,
        "busy_fraction": busy / wall if where == "gpu" else None,
        "kernels": len(events["device"] or events["host"]) / steps,
        "kinds_ms": {k: round(v, 3) for k, v in kinds.most_common()},
        "top_ms": {k[:120]: round(v, 3) for k, v in names.most_common(top)},
    }


def measure_profile(
    size_name, precision, steps=3, top=12, batch=None, xla=False, unroll=True, fused=None
):
    """The profile part's row: `step_profile`, with `op_ms` and `all_ops_ms` (the top
    ops and the sum) as the CPU rows name them."""
    row = step_profile(size_name, precision, batch, xla, unroll, steps, top, fused)
    row["op_ms"] = row["top_ms"]
    row["all_ops_ms"] = round(row["busy_ms"], 1)
    return row
