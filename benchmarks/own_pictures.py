"""The demo's recipe on the pictures a reader makes, over seeds: the test split's scores, the
robustness rows (rotated, hand-drawn, photographed sheet among them) and the hand-drawn
scenes packaged with keras_saat, each run trained by the command line as a user trains.

    python -m benchmarks.own_pictures --root /tmp/own --seeds 0 1 2 \\
        --out benchmarks/results/own-pictures-DATE.json

`--set KEY=VALUE` (repeated) is passed to `keras-saat train`: an experiment beside the
recipe, in its own --root.

A seed's workdir is reused when it holds a trained model, and its scores when they are
newer than the model. "Done when" of the own-pictures
work: each of rotated, hand-drawn and photographed sheet within 0.05 BLEU-4 of in
distribution with attention hits >= 0.9 on every seed, the test BLEU-4 >= 0.95, and the
hand-drawn scenes named right.
"""

import argparse
import json
import sys
from pathlib import Path

from benchmarks.familiarity import keras_saat
from benchmarks.harness import benchmark_report
from keras_saat.data.shapes import HAND_DRAWN, HAND_DRAWN_DIR
from keras_saat.evaluation.robustness import plain_caption

OWN = ("rotated 5-8 degrees", "hand-drawn", "photographed sheet")


def run_seed(workdir, seed, scenes, settings=()):
    if not (workdir / "model.keras").exists():
        extra = [part for setting in settings for part in ("--set", setting)]
        keras_saat("train", "--config", "shapes_soft", "--workdir", workdir,
                   "--set", f"model.seed={seed}", "--set", f"train.seed={seed}", *extra)  # fmt: skip
    test_file, val_file = (workdir / "eval" / split / "metrics.json" for split in ("test", "val"))
    out = workdir / "hand_drawn.jsonl"
    if not scored(workdir, test_file, val_file, out):
        keras_saat("evaluate", "--workdir", workdir, "--split", "test")
        keras_saat("evaluate", "--workdir", workdir, "--split", "val", "--beam-size", "1",
                   "--robustness", scenes)  # fmt: skip
        out.unlink(missing_ok=True)
        keras_saat("caption", "--workdir", workdir, "--out", out, HAND_DRAWN_DIR)
    test, val = (json.loads(path.read_text()) for path in (test_file, val_file))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    named = {Path(r["image"]).name: r["caption"] for r in rows}
    return {
        "test": {k: test[k] for k in ("bleu_4", "cider", "meteor", "hit_rate") if k in test},
        "robustness": val["robustness"]["rows"],
        "hand_drawn": {
            name: {"caption": named.get(name), "right": plain_caption(named.get(name, "")) == want}
            for name, want in HAND_DRAWN.items()
        },
    }


def scored(workdir, *files):
    """Whether every file of a seed's scores is there, written after its model."""
    model = (workdir / "model.keras").stat().st_mtime
    return all(f.exists() and f.stat().st_mtime > model for f in files)


def summary(runs):
    rows = {}
    for run in runs.values():
        base = run["robustness"][0]["bleu_4"]
        for row in run["robustness"]:
            entry = rows.setdefault(row["shift"], {"bleu_4": [], "change": [], "hits": []})
            entry["bleu_4"].append(row["bleu_4"])
            entry["change"].append(row["bleu_4"] - base)
            entry["hits"].append(row["hit_rate"])
    own_ok = all(
        min(rows[name]["change"]) >= -0.05 and min(rows[name]["hits"]) >= 0.9 for name in OWN
    )
    test_ok = all(run["test"]["bleu_4"] >= 0.95 for run in runs.values())
    named = [sum(v["right"] for v in run["hand_drawn"].values()) for run in runs.values()]
    return {"rows": rows, "own_rows_within_0.05": own_ok, "test_bleu_4_at_least_0.95": test_ok,
            "hand_drawn_named_right": named}  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="a folder for the workdirs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--scenes", type=int, default=200, help="scenes a robustness row")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for keras-saat train, beside the recipe's")  # fmt: skip
    parser.add_argument("--out", help="where to write the JSON report")
    args = parser.parse_args(argv)
    runs = {
        f"seed{s}": run_seed(args.root / f"seed{s}", s, args.scenes, args.set) for s in args.seeds
    }
    fields = {"recipe": "shapes_soft", "settings": args.set, "runs": runs, "summary": summary(runs)}
    benchmark_report("own_pictures.py", fields, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
