"""Captioning as a Beam pipeline against a plain loop over the same SavedModel, same cores.

    python -m benchmarks.beam_caption --saved-model models/cap --count 2000 \\
        [--out benchmarks/results/cpu-beam-DATE.json]

Renders `count` Shapes scenes once (seed 11), then captions them, each way in a fresh
process, in one run:
  plain        read each file, call `serving_default` 32 images at a time, write JSON lines
  beam-1       keras-saat caption --runner local (FnApiRunner, in process)
  beam-2       the same with -- --direct_num_workers=2 --direct_running_mode=multi_processing
  beam-2-large the same with --large-model (one model copy, served to both workers)
and reports wall time, images/s (and its ratio to plain) and the peak resident memory
of the whole process tree (sampled every 0.1 s: Beam's workers are child processes).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks.harness import benchmark_report

ROOT = Path(__file__).parents[1]

PLAIN = """
import json, sys
import tensorflow as tf
from keras_saat.beam.pipeline_runs import saved_model_folder
model, folder, out, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
from pathlib import Path
paths = sorted(str(p) for p in Path(folder).glob("*.png"))
call = tf.saved_model.load(saved_model_folder(model)).signatures["serving_default"]
with open(out, "w") as f:
    for start in range(0, len(paths), batch):
        chunk = paths[start : start + batch]
        result = call(image_bytes=tf.constant([Path(p).read_bytes() for p in chunk]))
        for i, path in enumerate(chunk):
            ok = bool(result["valid"][i])
            f.write(json.dumps({"image": path,
                "caption": result["caption"][i].numpy().decode() if ok else None,
                "log_prob": round(float(result["log_prob"][i]), 5) if ok else None,
                "error": result["error"][i].numpy().decode()}) + "\\n")
"""


def tree_rss(process):
    """Resident bytes of a process and all its descendants."""
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measured(command, env):
    """(seconds, peak tree RSS in MiB) of running `command` to its end."""
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    process, peak, done = psutil.Process(child.pid), 0, threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            try:
                peak = max(peak, tree_rss(process))
            except psutil.Error:
                pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = child.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"{command} failed:\n{err.decode()[-2000:]}")
    return seconds, peak / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", required=True, help="a keras-saat export model base")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()
    from keras_saat.data.shapes_dataset import write_shapes_dataset

    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    scratch = Path(tempfile.mkdtemp(prefix="beam-caption-"))
    try:
        write_shapes_dataset(scratch / "world", train=args.count, val=0, test=0, seed=11)
        images = scratch / "world" / "images"
        cli = [sys.executable, "-m", "keras_saat.cli", "caption", "--saved-model"]
        cli += [args.saved_model, str(images), "--runner", "local"]
        cli += ["--batch-size", str(args.batch_size), "--shard-size", "250"]
        two = ["--", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
        runs = {
            "plain": [sys.executable, "-c", PLAIN, args.saved_model, str(images),
                      str(scratch / "plain.jsonl"), str(args.batch_size)],
            "beam-1": [*cli, "--out", str(scratch / "beam-1")],
            "beam-2": [*cli, "--out", str(scratch / "beam-2"), *two],
            "beam-2-large": [*cli, "--out", str(scratch / "beam-2-large"), "--large-model", *two],
        }  # fmt: skip
        rows = []
        for name, command in runs.items():
            seconds, peak = measured(command, env)
            rows.append(
                {
                    "run": name,
                    "images": args.count,
                    "seconds": round(seconds, 1),
                    "images_per_s": round(args.count / seconds, 1),
                    "peak_tree_rss_mb": round(peak),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        plain = rows[0]["images_per_s"]
        for row in rows:
            row["vs_plain"] = round(row["images_per_s"] / plain, 2)
        captions = {}
        for name in runs:
            files = (
                [scratch / "plain.jsonl"] if name == "plain" else (scratch / name).glob("*.jsonl")
            )
            captions[name] = {
                json.loads(line)["image"]: json.loads(line)["caption"]
                for f in files
                for line in Path(f).read_text().splitlines()
            }
        same = all(captions[name] == captions["plain"] for name in runs)
        benchmark_report("beam_caption.py", {"same_captions": same, "rows": rows}, args.out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
