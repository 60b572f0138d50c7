"""The parts of `python -m benchmarks`: what each measures, with which arguments, and the
line it logs. A new part is a measuring function and one `register_part(Part(...))`.

A part's `plan(device, precisions)` lists the argument tuples it runs with; `run_all`
runs each tuple in a fresh process (`runner.run_in_subprocess`) and stores the rows
as a list under the part's name.
"""

import dataclasses
from collections.abc import Callable

from benchmarks.harness import compute, hostile, pipelines, profiling, scale
from benchmarks.harness.malloc import measure_malloc
from benchmarks.harness.runner import peak_rss_mb
from benchmarks.harness.sizes import SIZES
from keras_saat.registries import Registry
from tests.support import hostile_cases

# Batch sizes of the batch/throughput curve (paper size, soft attention, best precision).
BATCH_CURVE = {"gpu": (64, 128, 256, 512, 1024, 2048), "cpu": (16, 64, 256)}


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of the benchmark.

    Args:
        name: str. `python -m benchmarks --part NAME`.
        measure: callable. `measure(*args) -> dict`, run in a fresh process.
        plan: callable. `plan(device, precisions) -> list of argument tuples`.
        line: callable. `line(row) -> str`, the log line of one row.
        memory_key: callable or None. `memory_key(row) -> str`, the row's entry in the
            report's `peak_rss_mb`; None leaves the rows' peaks out. Defaults to None.
        run: callable or None. `run(log) -> result`, for a part that runs its own
            processes instead of a plan (malloc). Defaults to None.
        options: tuple of str. The command-line options `plan` takes as keywords
            (`python -m benchmarks --images N`: "images"). Defaults to ().
    """

    name: str
    measure: Callable
    plan: Callable = lambda device, precisions: [()]
    line: Callable = lambda row: ""
    memory_key: Callable | None = None
    run: Callable | None = None
    options: tuple = ()


PARTS = Registry("bench part")
register_part = PARTS.register


def add_part(part):
    """Registers `part` under its name; returns it."""
    return register_part(part.name, part)


def run_part(name, *args):
    """Runs one part's measurement here and returns its row with this process's peak RSS
    and the CPU kernels and malloc settings it ran with (the subprocess entry point)."""
    from keras_saat.runtime.cpu_kernels import onednn_enabled
    from keras_saat.runtime.memory import malloc_tuned

    result = PARTS.get(name).measure(*args)
    result["peak_rss_mb"] = peak_rss_mb()
    result["onednn"] = onednn_enabled()
    result["malloc_tuned"] = malloc_tuned()
    return result


def bench_precisions(device):
    """float32, and bfloat16 where the hardware computes it (`resolve_precision("auto")`)."""
    return ["float32"] + (["bfloat16"] if device["auto_precision"] == "bfloat16" else [])


def train_plan(device, precisions):
    """(size, attention, xla, steps, precision, batch, unroll) of each train row.

    CPU: both sizes, soft and hard, with and without XLA, in every precision, batch 64,
    teacher forcing unrolled (the default).
    GPU: XLA in every precision at batch 64 and (paper size) 512, one float32 row without
    XLA per size, and hard attention at the paper size in the best precision; then the
    paper size in the best precision at batch 64 and 512 with teacher forcing in a
    `tf.while_loop` (`train.unroll: false`), beside the unrolled rows.
    """
    if not device["gpu"]:
        rows = [
            (size, attention, xla, precision, 64, True)
            for size in SIZES
            for attention in ("soft", "hard")
            for xla in (True, False)
            for precision in precisions
        ]
    else:
        rows = []
        for size in SIZES:
            rows.append((size, "soft", False, "float32", 64, True))
            rows += [(size, "soft", True, precision, 64, True) for precision in precisions]
        rows += [("paper", "soft", True, precision, 512, True) for precision in precisions]
        rows.append(("paper", "hard", True, precisions[-1], 64, True))
        rows += [("paper", "soft", True, precisions[-1], batch, False) for batch in (64, 512)]
    return [
        (size, att, xla, 10, precision, batch, unroll)
        for size, att, xla, precision, batch, unroll in rows
    ]


def _train_line(row):
    return (
        f"train {row['size']:8s} {row['attention']} {row['precision']:8s} batch {row['batch']:4d} "
        f"xla={row['xla']!s:5s}{'' if row['unroll'] else ' loop'}: "
        f"{row['captions_per_s']:8.1f} captions/s, "
        f"{row['gflops']:8.1f} GFLOP/s ({row['fraction_of_limit']:.2f} of the limit, "
        f"{row['matmul_gflops']:.0f} GFLOP/s alongside), trace {row['trace_s']:.1f}s, "
        f"first call {row['compile_s']:.1f}s"
    )


def _train_key(row):
    form = "" if row["unroll"] else "_loop"
    xla = "xla" if row["xla"] else "noxla"
    return f"train_{row['size']}_{row['attention']}_{xla}_{row['precision']}_{row['batch']}{form}"


def _profile_line(row):
    head = (
        f"profile {row['size']:8s} {row['precision']:8s} batch {row['batch']}"
        f"{' xla' if row['xla'] else ''}{'' if row['unroll'] else ' loop'}: "
        f"step {row['wall_ms']:.1f} ms, "
    )
    if row["where"] == "gpu":
        head += (
            f"kernels {row['busy_ms']:.1f} ms ({100 * row['busy_fraction']:.0f} % busy, "
            f"{row['kernels']:.0f} launches); "
        )
    else:
        head += f"ops {row['all_ops_ms']:.0f} ms; "
    return head + ", ".join(f"{k} {v:.1f}" for k, v in row["kinds_ms"].items())


add_part(Part("device", compute.measure_device))
add_part(
    Part(
        "matmul",
        compute.measure_matmul,
        plan=lambda device, precisions: [(None, 10, p) for p in precisions],
        line=lambda row: (
            f"matmul {row['precision']} {row['n']}x{row['n']}: best "
            f"{row['matmul_gflops']:.1f} GFLOP/s, median {row['median_gflops']:.1f}"
        ),
        memory_key=lambda row: f"matmul_{row['precision']}",
    )
)
add_part(
    Part(
        "train",
        compute.measure_train,
        plan=train_plan,
        line=_train_line,
        memory_key=_train_key,
    )
)
add_part(
    Part(
        "batches",
        compute.measure_train,
        plan=lambda device, precisions: [
            ("paper", "soft", bool(device["gpu"]), 10, precisions[-1], batch)
            for batch in BATCH_CURVE["gpu" if device["gpu"] else "cpu"]
        ],
        line=lambda row: (
            f"batch curve, paper soft {row['precision']} batch {row['batch']:5d}: "
            f"{row['captions_per_s']:9.1f} captions/s, {row['gflops']:9.1f} GFLOP/s "
            f"({row['fraction_of_limit']:.3f} of the limit)"
        ),
    )
)
add_part(
    Part(
        "input",
        pipelines.measure_input,
        plan=lambda device, precisions: [
            ("paper", batching, batch, 4000, 2, resident)
            for resident in (False, True)
            for batching in ("per_caption", "per_image")
            for batch in (64, 512)
        ],
        line=lambda row: (
            f"input paper {row['path']:8s} {row['batching']:11s} batch {row['batch']:3d}: "
            f"{row['captions_per_s']:9.0f} captions/s, "
            f"{row['bytes_per_caption'] / 1024:.1f} KiB a caption to the step"
            + (
                f", {row['index_captions_per_s']:.0f} without the gather, loaded in "
                f"{row['load_s']:.1f}s"
                if row["load_s"] is not None
                else ""
            )
        ),
        memory_key=lambda row: f"input_{row['path']}_{row['batching']}_{row['batch']}",
    )
)
add_part(
    Part(
        "profile",
        profiling.measure_profile,
        plan=lambda device, precisions: (
            [("paper", precisions[-1], 3, 12, 512, True, unroll) for unroll in (True, False)]
            if device["gpu"]
            else [(size, p) for size in SIZES for p in precisions]
        ),
        line=_profile_line,
        memory_key=lambda row: (
            f"profile_{row['size']}_{row['precision']}_{row['batch']}"
            f"{'' if row['unroll'] else '_loop'}"
        ),
    )
)
add_part(
    Part(
        "extract",
        pipelines.measure_extract,
        plan=lambda device, precisions: [
            (backbone, None, p) for backbone in ("efficientnetb0", "vgg16") for p in precisions
        ],
        line=lambda row: (
            f"extract {row['backbone']} {row['precision']} ({row['images']} images): "
            f"{row['images_per_s']:.1f} img/s, bare {row['bare_images_per_s']:.1f} img/s, "
            f"ratio {row['ratio']:.2f}"
        ),
        memory_key=lambda row: f"extract_{row['backbone']}_{row['precision']}",
    )
)
add_part(
    Part(
        "decode",
        compute.measure_decode,
        plan=lambda device, precisions: [
            (3, p, batch) for p in precisions for batch in ((64, 512) if device["gpu"] else (64,))
        ],
        line=lambda row: (
            f"decode tutorial size, {row['precision']}, batch {row['batch']}: greedy "
            f"{row['greedy_captions_per_s']:.0f} captions/s, beam 3 "
            f"{row['beam3_captions_per_s']:.0f} captions/s "
            f"(mean length {row['greedy_mean_length']:.1f} tokens; feeding the batch "
            f"from NumPy float64 would add {row['feed_ms']:.0f} ms a call)"
        ),
        memory_key=lambda row: f"decode_{row['precision']}_{row['batch']}",
    )
)
add_part(
    Part(
        "serving",
        pipelines.measure_serving,
        plan=lambda device, precisions: [(50, 8, p) for p in precisions],
        line=lambda row: (
            f"serving EfficientNetB0 224, beam 3, {row['precision']}: p50 {row['p50_ms']:.0f} ms, "
            f"p99 {row['p99_ms']:.0f} ms, batch 32 {row['batch32_images_per_s']:.1f} images/s"
        ),
        memory_key=lambda row: f"serving_{row['precision']}",
    )
)
add_part(Part("malloc", compute.measure_train, run=measure_malloc))
add_part(
    Part(
        "hostile",
        hostile.measure_hostile,
        plan=lambda device, precisions: [(name,) for name in hostile_cases.case_names()],
        line=lambda row: (
            f"hostile {row['area']:15s} {row['case']:28s} {row['peak_mb']:7.0f} MB peak, "
            f"{row['seconds']:6.2f}s: {row['answer'][:90]}"
        ),
        memory_key=lambda row: f"hostile_{row['case']}",
    )
)
add_part(
    Part(
        "scale",
        scale.measure_scale,
        plan=lambda device, precisions, images=None: [
            (shape, int(images or 10_000)) for shape in scale.SHAPES
        ],
        line=scale.scale_line,
        memory_key=lambda row: f"scale_{row['shape']}_{row['images']}",
        options=("images",),
    )
)
