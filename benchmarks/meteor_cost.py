"""What METEOR adds to an evaluation's scoring: `coco_scores` with and without it.

    python -m benchmarks.meteor_cost [--images 200] [--repeats 3] [--out FILE.json]

Scores captions of `--images` freshly sampled Shapes scenes (5 references each; 200,
the size of the demo's test split, by default; each hypothesis one of its references
with a word dropped) with pycocoevalcap through
`keras_saat.evaluation.coco_metrics.coco_scores`, Java on: once with METEOR and once
without (`decode.meteor=false`), alternated `--repeats` times. Both runs use the PTB
tokenizer; the difference is METEOR 1.5's Java process, which loads its paraphrase
tables at every evaluation. Needs `java` on the PATH.
"""

import argparse
import json
import time

import numpy as np

from benchmarks.harness.runner import machine
from keras_saat.data.shapes import reference_captions, sample_objects
from keras_saat.evaluation.coco_metrics import coco_scores, java_available


def predictions(images, seed=0):
    rng = np.random.default_rng(seed)
    references, hypotheses = [], []
    for _ in range(images):
        refs = reference_captions(sample_objects(rng))
        words = refs[0].split()
        del words[int(rng.integers(len(words)))]
        references.append(refs)
        hypotheses.append(" ".join(words))
    return references, hypotheses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the seconds here (JSON)")
    args = parser.parse_args()
    if not java_available():
        raise SystemExit("METEOR needs Java: put a `java` executable on the PATH")
    references, hypotheses = predictions(args.images)
    seconds = {True: [], False: []}
    for _ in range(args.repeats):
        for meteor in (True, False):
            start = time.perf_counter()
            coco_scores(references, hypotheses, use_java=True, meteor=meteor)
            seconds[meteor].append(time.perf_counter() - start)
    where = machine()
    print(f"{where['cpu']} ({where['cpus']} cpus), {where['date']}, {args.images} images:")
    for meteor, label in ((True, "with METEOR"), (False, "without METEOR")):
        print(f"  {label}: " + ", ".join(f"{s:.1f} s" for s in seconds[meteor]))
    if args.out:
        rows = {"with_meteor_s": seconds[True], "without_meteor_s": seconds[False]}
        with open(args.out, "w") as out:
            json.dump({"machine": where, "images": args.images, **rows}, out, indent=1)


if __name__ == "__main__":
    main()
