"""Plots of the performance page, drawn from the benchmark results in benchmarks/results/.

    python tools/performance_plots.py [--out docs/performance]

Writes batch_curve.png (training captions/s against the batch, paper size, soft
attention, CPU and GPU) and cpu_gpu.png (the batch-64 train rows of a CPU and a GPU run
side by side, one bar each). A chart whose bars, labels and values do not match one to
one raises instead of being drawn. `tools/docs.py` runs it before every build, so the page's plots are the files'.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CPU_RUN = "cpu-bench-2026-11-23-bfloat16.json"  # every part, both precisions, one run
GPU_RUN = "gpu-2026-11-23-h100.json"


def load(name):
    return json.loads((RESULTS / name).read_text())


def train_rows(report, size="paper", attention="soft"):
    return [
        r
        for r in report["train"] + report.get("batches", [])
        if r.get("size", "paper") == size and r.get("attention", "soft") == attention
    ]


def batch_curve(cpu, gpu, out):
    figure, axis = plt.subplots(figsize=(6.4, 4.0))
    series = {}
    for where, report in (("CPU, 2 cores", cpu), ("GPU, H100", gpu)):
        for row in train_rows(report):
            if where.startswith("CPU") and row.get("xla"):
                continue  # the CPU default trains without XLA
            if where.startswith("GPU") and not row.get("xla"):
                continue
            if row.get("unroll") is False:
                continue
            key = f"{where}, {row['precision']}"
            # The batch sweep's rows come last: its point replaces the train part's.
            series.setdefault(key, {})[row["batch"]] = row["captions_per_s"]
    for key, points in sorted(series.items()):
        batches = sorted(points)
        axis.plot(batches, [points[b] for b in batches], marker="o", label=key)
    drawn = [line.get_label() for line in axis.get_lines()]
    if drawn != sorted(series):
        raise ValueError(f"lines {drawn} for the series {sorted(series)}")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("batch (captions)")
    axis.set_ylabel("training captions/s")
    axis.set_title("Paper size (L 196, D 512, LSTM 1000), soft attention")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(out / "batch_curve.png", dpi=110)
    plt.close(figure)


def cpu_gpu_rows(cpu, gpu):
    """The bars of cpu_gpu.png: one per precision and device, from each run's train part
    (its batch sweep repeats the batch-64 configuration, which would be a second bar of
    the same name). Returns (labels, values)."""
    labels, values = [], []
    for where, report, xla in (("CPU, 2 cores", cpu, False), ("H100", gpu, True)):
        for row in report["train"]:
            if (
                row.get("size", "paper") == "paper"
                and row.get("attention", "soft") == "soft"
                and row["batch"] == 64
                and bool(row.get("xla")) == xla
                and row.get("unroll") is not False
            ):
                labels.append(f"{where}, {row['precision']}")
                values.append(row["captions_per_s"])
    return labels, values


def bar_chart(axis, labels, values):
    """Horizontal bars, each with its value at its end. Raises ValueError unless every
    label is distinct and has exactly one value, one bar and one value label: matplotlib
    draws repeated labels as one bar with several values written over it."""
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels for {len(values)} values")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"repeated bar labels {repeated}: each bar needs its own label")
    bars = axis.barh(labels, values, color="#3f51b5")
    texts = [axis.text(value, y, f" {value:,.0f}", va="center") for y, value in enumerate(values)]
    ticks = [tick.get_text() for tick in axis.get_yticklabels()]
    if not len(bars) == len(texts) == len(ticks) == len(labels):
        raise ValueError(
            f"{len(bars)} bars, {len(ticks)} axis labels and {len(texts)} values drawn "
            f"for {len(labels)} rows"
        )
    return bars


def cpu_gpu(cpu, gpu, out):
    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    bar_chart(axis, *cpu_gpu_rows(cpu, gpu))
    axis.set_title(
        f"CPU {cpu['machine']['date']}, H100 {gpu['machine']['date']} (benchmarks/results/)",
        fontsize=9,
    )
    axis.set_xscale("log")
    axis.margins(x=0.15)  # room for the longest bar's value
    axis.set_xlabel("training captions/s, batch 64, paper size, soft (log scale)")
    figure.tight_layout()
    figure.savefig(out / "cpu_gpu.png", dpi=110)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu, gpu = load(CPU_RUN), load(GPU_RUN)
    batch_curve(cpu, gpu, out)
    cpu_gpu(cpu, gpu, out)
    return out


if __name__ == "__main__":
    main()
