"""The GPU rows of `python -m benchmarks` in priority order under a deadline, each in a fresh
process, appended to a JSON-lines file as they finish (a device call has 10 minutes).

    python -m benchmarks.gpu.rows OUT.jsonl DEADLINE_S ROW_SET
"""

import json
import sys
import time

from benchmarks.harness import run_in_subprocess

ROWS = {
    "smoke": [("matmul", None, 2, "bfloat16"), ("decode", 1, "bfloat16", 8)],
    "core": [
        ("matmul", None, 10, "float32"),
        ("matmul", None, 10, "bfloat16"),
        ("train", "paper", "soft", True, 10, "bfloat16", 64),
        ("train", "paper", "soft", True, 10, "float32", 64),
        ("train", "paper", "soft", False, 10, "float32", 64),
        ("train", "paper", "soft", True, 10, "bfloat16", 512),
        ("train", "paper", "soft", True, 10, "float32", 512),
        # teacher forcing in a tf.while_loop (train.unroll: false) beside the unrolled rows
        ("train", "paper", "soft", True, 10, "bfloat16", 64, False),
        ("train", "paper", "soft", True, 10, "bfloat16", 512, False),
        ("decode", 3, "bfloat16", 64),
        ("decode", 3, "float32", 64),
        ("decode", 3, "bfloat16", 512),
        ("input", "paper", "per_caption", 512, 4000, 2, False),
        ("input", "paper", "per_image", 512, 4000, 2, False),
        ("input", "paper", "per_caption", 64, 4000, 2, False),
        ("input", "paper", "per_image", 64, 4000, 2, False),
        # the features resident on the device, gathered by index
        ("input", "paper", "per_caption", 512, 4000, 2, True),
        ("input", "paper", "per_image", 512, 4000, 2, True),
        ("profile", "paper", "bfloat16", 3, 12, 512, True, True),
        ("profile", "paper", "bfloat16", 3, 12, 512, True, False),
    ],
    "more": [
        ("train", "paper", "soft", True, 10, "bfloat16", 1024),
        ("train", "paper", "soft", True, 10, "bfloat16", 2048),
        ("train", "paper", "soft", True, 10, "bfloat16", 256),
        ("train", "tutorial", "soft", True, 10, "bfloat16", 64),
        ("train", "tutorial", "soft", True, 10, "float32", 64),
        ("train", "tutorial", "soft", False, 10, "float32", 64),
        ("train", "paper", "hard", True, 10, "bfloat16", 64),
        ("train", "paper", "soft", True, 10, "bfloat16", 128),
        ("decode", 3, "float32", 512),
    ],
}

out_path, deadline, row_set = sys.argv[1], float(sys.argv[2]), sys.argv[3]
started = time.perf_counter()
with open(out_path, "a") as out:
    for part, *args in ROWS[row_set]:
        if time.perf_counter() - started > deadline:
            print(f"deadline: skipped {part} {args}", flush=True)
            continue
        try:
            row = run_in_subprocess(part, *args)
        except RuntimeError as err:
            row = {"error": str(err)[-1500:]}
        row.update(part=part, args=args)
        out.write(json.dumps(row) + "\n")
        out.flush()
        brief = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}
        print(json.dumps(brief), flush=True)
