"""`keras-saat caption` over a folder: images/s and peak memory against the image count.

    python -m benchmarks.caption_folder --workdir runs/demo --counts 300 10000 [--beam-size 3]

Renders the largest count of Shapes scenes once (seed 11, not the demo's), then
captions the first N of them for each count in a fresh process (`keras-saat
caption DIR --out FILE.jsonl`), and reports wall time, images/s and the process's
peak resident memory. Streaming means the peak does not grow with N.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The command, then its own peak resident memory (KiB) on stderr.
MEASURED = (
    "import resource, sys; from keras_saat.cli import main; code = main(sys.argv[1:]); "
    "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
    "sys.exit(code)"
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="a trained workdir")
    parser.add_argument("--preset", help="or a preset folder")
    parser.add_argument("--counts", type=int, nargs="+", default=[300, 10000])
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()
    from keras_saat.data.shapes_dataset import write_shapes_dataset

    scratch = Path(tempfile.mkdtemp(prefix="caption-folder-"))
    try:
        write_shapes_dataset(scratch / "world", train=max(args.counts), val=0, test=0, seed=11)
        images = sorted((scratch / "world" / "images").glob("*.png"))
        model = ["--workdir", args.workdir] if args.workdir else ["--preset", args.preset]
        rows = []
        for count in args.counts:
            folder = scratch / f"folder_{count}"
            folder.mkdir()
            for path in images[:count]:
                (folder / path.name).symlink_to(path)
            out = scratch / f"captions_{count}.jsonl"
            command = [sys.executable, "-c", MEASURED, "caption", *model, str(folder)]
            command += ["--out", str(out), "--beam-size", str(args.beam_size)]
            command += ["--batch-size", str(args.batch_size)]
            start = time.perf_counter()
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            peak = int(done.stderr.rsplit("MAXRSS ", 1)[1].split()[0])  # KiB
            captioned = sum(1 for line in out.read_text().splitlines() if '"error": ""' in line)
            row = {
                "images": count,
                "captioned": captioned,
                "seconds": round(seconds, 1),
                "images_per_s": round(count / seconds, 1),
                "peak_rss_mb": round(peak / 1024),
                "beam_size": args.beam_size,
                "batch_size": args.batch_size,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
