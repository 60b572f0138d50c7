"""A command stopped by SIGINT or SIGTERM at random moments: does it end cleanly?

    python -m benchmarks.interrupts --tries 20 [--signal SIGINT] [--command extract-features]
        [--out benchmarks/results/cpu-interrupts-DATE.json]

Renders a Shapes set once (600 train, 50 val, 50 test; seed 0), then for each try starts
`keras-saat extract-features` (the tests' default config, 64 images a shard) in a fresh
workdir, or `caption --out` / `export` of a model trained once (1 epoch), sends the
signal after a delay drawn uniformly from [0, --window] s (counted from extraction's
first line, else from the start), and records its exit status (130 or 143: stopped
cleanly; 0: done before the signal; -6: aborted), its last stderr line, and the
temporaries (or export staging folders) left. A clean try has our one line.
"""

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
DEFAULTS = ROOT / "tests" / "configs" / "defaults.yaml"
CLI = [sys.executable, "-m", "keras_saat.cli"]


def start(command, tmp, world, number):
    """argv, the folder whose leftovers are counted, and the line that says work started
    (None: the delay counts from the start)."""
    workdir = tmp / f"w{number}"
    data = ["--set", "data.dataset=karpathy", "--set", f"data.path={world}/dataset_shapes.json"]
    if command == "extract-features":
        argv = ["extract-features", "--config", str(DEFAULTS), "--workdir", str(workdir), *data]
        argv += ["--set", "data.cache_shard_size=64"]
        return argv, workdir / "features", "feature cache"
    if command == "export":
        base = tmp / f"base{number}"
        return ["export", "--workdir", str(tmp / "trained"), "--out", str(base)], base, None
    out = tmp / f"captions{number}.jsonl"
    argv = ["caption", "--workdir", str(tmp / "trained"), f"{world}/images", "--out", str(out)]
    return argv, tmp, None


def one_try(command, tmp, world, number, sig, window):
    argv, folder, started = start(command, tmp, world, number)
    process = subprocess.Popen(
        [*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    if started:
        for line in process.stdout:  # the run has started its work
            if started in line:
                break
    delay = random.uniform(0, window)
    time.sleep(delay)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=300)
    lines = stderr.strip().splitlines()
    left = []
    if folder.is_dir():
        left = sorted(p.name for p in folder.iterdir() if "tmp" in p.name or ".partial" in p.name)
    return {
        "delay_s": round(delay, 2),
        "returncode": process.returncode,
        "last_line": lines[-1] if lines else "",
        "aborted": process.returncode < 0 or "terminate called" in stderr,
        "temporaries_left": left,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--signal", default="SIGINT", choices=["SIGINT", "SIGTERM"])
    parser.add_argument("--command", default="extract-features",
                        choices=["extract-features", "caption", "export"])  # fmt: skip
    parser.add_argument("--window", type=float, default=4.0, help="seconds to draw delays from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()
    random.seed(args.seed)
    sig = getattr(signal, args.signal)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        world = tmp / "world"
        make = [*CLI, "make-shapes", "--out", str(world), "--train", "600", "--val", "50"]
        subprocess.run([*make, "--test", "50"], check=True, capture_output=True, cwd=ROOT)
        if args.command != "extract-features":
            train = ["train", "--config", str(DEFAULTS), "--workdir", str(tmp / "trained")]
            train += ["--set", "data.dataset=karpathy"]
            train += ["--set", f"data.path={world}/dataset_shapes.json", "--set", "train.epochs=1"]
            subprocess.run([*CLI, *train], check=True, capture_output=True, cwd=ROOT)
        tries = []
        for number in range(args.tries):
            tries.append(one_try(args.command, tmp, world, number, sig, args.window))
            print(json.dumps(tries[-1]), flush=True)
    report = {
        "command": args.command,
        "signal": args.signal,
        "tries": len(tries),
        "clean": sum(t["returncode"] in (130, 143) and not t["temporaries_left"] for t in tries),
        "aborted": sum(t["aborted"] for t in tries),
        "finished_before_the_signal": sum(t["returncode"] == 0 for t in tries),
        "runs": tries,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
