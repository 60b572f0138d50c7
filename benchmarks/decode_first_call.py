"""A fresh process's first decode: `Captioner.decode`'s search with and without AutoGraph.

    python -m benchmarks.decode_first_call [--repeats 3] [--out FILE.json]

Each measurement is a new Python process that builds the demo's Captioner (untrained) on
the Shapes vocabulary and times its first `decode` call (trace, compile where decoding
compiles, and the run) on two images' features, beam 3 and greedy, soft attention. The
"autograph" rows wrap the same `generate_step` in `tf.function(autograph=True)`, as
`Captioner.decode` would with AutoGraph on; the "plain" rows call `Captioner.decode`
itself (`autograph=False`). The processes alternate, which goes first swapping each
repeat, so drift on a shared machine falls on both; the clock stops once the tokens
are on the host.
"""

import argparse
import json
import os
import subprocess
import sys

from benchmarks.harness import benchmark_report
from benchmarks.harness.runner import machine

CHILD = """
import functools, json, sys, time
import numpy as np
import tensorflow as tf
from keras_saat import Captioner
from keras_saat.data.shapes import vocabulary_words
from keras_saat.text import Vocabulary

mode, beam_size = sys.argv[1], int(sys.argv[2])
vocabulary = Vocabulary.build([vocabulary_words()])
model = Captioner(vocabulary.words, backbone="shapes_cnn_small_norm", feature_dim=128,
                  embedding_dim=64, lstm_units=256, attention="soft", dropout=0.3,
                  location_embedding=True, seed=0)  # the demo's (shapes_soft.yaml)
features = np.zeros((2, model.encoder.num_locations, model.encoder.feature_channels), "float32")
start = time.perf_counter()
if mode == "autograph":
    step = functools.partial(model.generate_step, max_length=20, beam_size=beam_size,
                             length_penalty=0.0)
    out = tf.function(step, jit_compile=model.decode_jit_compile, autograph=True)(features)
else:
    out = model.decode(features, max_length=20, beam_size=beam_size)
out["tokens"].numpy()
print(json.dumps(time.perf_counter() - start))
"""


def first_call(mode, beam_size):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(beam_size)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the seconds here (JSON)")
    args = parser.parse_args()
    rows = []
    for repeat in range(args.repeats):
        for beam_size in (3, 1):
            for mode in ("autograph", "plain")[:: 1 if repeat % 2 == 0 else -1]:
                rows.append({"mode": mode, "beam_size": beam_size,
                             "first_call_s": first_call(mode, beam_size)})  # fmt: skip
    where = machine()
    print(f"{where['cpu']} ({where['cpus']} cpus), {where['date']}:")
    for beam_size in (3, 1):
        for mode in ("autograph", "plain"):
            seconds = [
                r["first_call_s"] for r in rows if (r["mode"], r["beam_size"]) == (mode, beam_size)
            ]
            print(f"  beam {beam_size}, {mode}: " + ", ".join(f"{s:.2f} s" for s in seconds))
    benchmark_report("decode_first_call.py", {"rows": rows}, args.out)


if __name__ == "__main__":
    main()
