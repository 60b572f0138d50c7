"""What the attention block writes for the backward pass: the (B, L, A) tensors in the
optimised HLO of one teacher-forced decoder pass with its gradients, under XLA, with
autodiff's scores and with the fused ones (`train.fused_scores`), teacher forcing
unrolled and in a loop. Runs on a CPU; the
count is the compiler's, not a timing, so it holds on a shared machine.

    python -m benchmarks.fused_scores_hlo [STEPS] [PRECISION] > rows.jsonl

STEPS (default 11) is T; PRECISION (default float32) the dtype policy. Each row names
the scores and the form (unrolled, or the loop), the (B, L, A) and (n, B, L, A) tensors
written at the top level of the executable (a fusion's output, a copy, or the buffer a
loop stacks its steps' energies in: memory traffic on a GPU), their bytes, and the tanh
the executable computes.
"""

import json
import re
import sys

import numpy as np
import tensorflow as tf

from keras_saat.layers import LSTMDecoder
from keras_saat.runtime.precision import dtype_policy

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 11
precision = sys.argv[2] if len(sys.argv) > 2 else "float32"
BATCH, LENGTH, UNITS = 8, 9, 5  # B, L, A: dimensions no other tensor of the pass has
BYTES = {"f32": 4, "bf16": 2, "f16": 2}


def optimised_hlo(fused, unroll):
    """The optimised HLO of one decoder pass and its gradients."""
    with dtype_policy(precision):
        decoder = LSTMDecoder(
            13, embedding_dim=6, lstm_units=7, attention_units=UNITS, attention="soft",
            dropout=0.3, seed=3, unroll=unroll, fused_scores=fused,
        )  # fmt: skip
        decoder.build(4)
    rng = np.random.default_rng(0)
    annotations = tf.constant(rng.normal(size=(BATCH, LENGTH, 4)), decoder.compute_dtype)
    ids = tf.constant(rng.integers(0, 13, (BATCH, steps)), tf.int32)

    @tf.function(jit_compile=True)
    def run(annotations, ids):
        with tf.GradientTape() as tape:
            tape.watch(annotations)
            out = decoder(annotations, ids, training=True)
            loss = sum(tf.reduce_sum(tf.cast(v, tf.float32) ** 2) for v in out.values())
        return tape.gradient(loss, [annotations, *decoder.trainable_weights])

    return run.experimental_get_compiler_ir(annotations, ids)(stage="optimized_hlo")


for unroll, fused in ((True, False), (True, True), (False, False), (False, True)):
    hlo = optimised_hlo(fused, unroll)
    entry = hlo[hlo.index("\nENTRY") :].splitlines()[1:]
    dims = f"{BATCH},{LENGTH},{UNITS}"
    written = {"BLA": [], "TBLA": []}
    for line in entry:
        found = re.search(rf"= (\w+)\[(\d+,)?{dims}\]", line)
        aliases = (" parameter(", " bitcast(", " get-tuple-element(")  # no new buffer
        if found and not any(alias in line for alias in aliases):
            stacked = int(found.group(2)[:-1]) if found.group(2) else 1
            written["TBLA" if found.group(2) else "BLA"].append((found.group(1), stacked))
    size = BATCH * LENGTH * UNITS
    everything = written["BLA"] + written["TBLA"]
    written_bytes = size * sum(BYTES.get(dtype, 4) * n for dtype, n in everything)
    row = {
        "scores": "fused" if fused else "autodiff",
        "form": "unrolled" if unroll else "loop",
        "steps": steps,
        "precision": precision,
        "bla_written": len(written["BLA"]),
        "tbla_written": len(written["TBLA"]),
        "bytes_written": written_bytes,
        "dtypes": sorted({dtype for dtype, _ in everything}),
        "tanh": len(re.findall(r" tanh\(", hlo)),
    }
    print(json.dumps(row), flush=True)
