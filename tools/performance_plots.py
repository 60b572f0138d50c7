"""Plots of the performance page, drawn from the benchmark results in benchmarks/results/.

    python tools/performance_plots.py [--out docs/performance]

Writes batch_curve.png (training captions/s against the batch, paper size, soft
attention, CPU and GPU) and cpu_gpu.png (the train rows of a CPU and a GPU run side by
side). `tools/docs.py` runs it before every build, so the page's plots are the files'.
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
            series.setdefault(key, {})[row["batch"]] = row["captions_per_s"]
    for key, points in sorted(series.items()):
        batches = sorted(points)
        axis.plot(batches, [points[b] for b in batches], marker="o", label=key)
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


def cpu_gpu(cpu, gpu, out):
    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    labels, values = [], []
    for where, report, xla in (("CPU", cpu, False), ("H100", gpu, True)):
        for row in train_rows(report):
            if (
                row["batch"] == 64
                and bool(row.get("xla")) == xla
                and row.get("unroll") is not False
            ):
                labels.append(f"{where} {row['precision']}")
                values.append(row["captions_per_s"])
    axis.barh(labels, values, color="#3f51b5")
    axis.set_xscale("log")
    axis.set_xlabel("training captions/s, batch 64 (log scale)")
    for y, value in enumerate(values):
        axis.text(value, y, f" {value:,.0f}", va="center")
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
