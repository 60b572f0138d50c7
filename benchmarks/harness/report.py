"""The whole benchmark: every registered part over its plan, one JSON report."""

import json
from pathlib import Path

from benchmarks.harness.parts import PARTS, bench_precisions
from benchmarks.harness.runner import machine, run_in_subprocess


def run_all(parts=None, log=print, options=None):
    """The named parts (None = all), each row in a fresh process; returns the report.

    `options` ({"images": N}) go to the plans of the parts that name them (`Part.options`).

    The report holds `machine`, `device`, a list of rows under each part's name,
    `peak_rss_mb` (each row's process, by the part's `memory_key`), and the CPU kernels
    (`onednn`) and malloc settings (`malloc_tuned`) the rows ran with.
    """
    names = parts or [name for name in PARTS.names() if name != "device"]
    report = {"machine": machine()}
    memory = {}
    settings = {"onednn": set(), "malloc_tuned": set()}

    def measured(name, *args):
        row = run_in_subprocess(name, *args)
        for key, seen in settings.items():
            seen.add(row.pop(key))
        return row

    # The device decides the precisions and the CPU or GPU plan of every other part.
    device = measured("device")
    device.pop("peak_rss_mb")
    report["device"] = device
    precisions = bench_precisions(device)
    capability = ".".join(str(v) for v in device["compute_capability"] or ())
    log(
        f"device: {device['gpu'] or 'CPU only'}"
        f"{f' (compute capability {capability})' if capability else ''}; "
        f"precisions {', '.join(precisions)}"
    )
    for name in names:
        part = PARTS.get(name)
        if name == "device":
            continue
        if part.run is not None:
            report[name] = part.run(log)
            continue
        report[name] = []
        given = {k: v for k, v in (options or {}).items() if k in part.options and v is not None}
        for args in part.plan(device, precisions, **given):
            row = measured(name, *args)
            peak = row.pop("peak_rss_mb")
            if part.memory_key is not None:
                memory[part.memory_key(row)] = peak
            report[name].append(row)
            log(part.line(row))
    if "matmul" in report:  # the float32 limit, where every report has it
        report["matmul_gflops"] = report["matmul"][0]["matmul_gflops"]
    report["peak_rss_mb"] = memory
    # TF_ENABLE_ONEDNN_OPTS and glibc's malloc settings change every number.
    for key, seen in settings.items():
        report[key] = seen.pop() if len(seen) == 1 else sorted(seen)
    return report


def write_report(report, path):
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


def benchmark_report(script, fields, out=None):
    """A `benchmarks/` script's report: the machine (`runner.machine`), the UTC time and
    the command that ran it, then `fields`; printed as JSON and written to `out` if given.

    Args:
        script: str. The script's path under benchmarks/ ("beam_caption.py").
        fields: dict. The measurements.
        out: str or Path, optional. Where to write the report.

    Returns:
        dict: the report.
    """
    import sys
    import time

    module = script.removesuffix(".py").replace("/", ".")
    report = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([f"python -m benchmarks.{module}", *sys.argv[1:]]),
        **fields,
    }
    print(json.dumps(report, indent=1))
    if out:
        write_report(report, out)
    return report
