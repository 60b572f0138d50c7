"""XLA's CPU compile at LLVM -O3 (the default) and -O0 (the test suite's setting).

    python -m benchmarks.xla_cpu_compile [--repeats 2] [--out FILE.json]

For a tiny captioner (the size the suite's trainer tests use: 16-d features on an 8x8
grid, LSTM 12, a 6-token caption, batch 8), soft and hard attention, each in a fresh
process with XLA_FLAGS=--xla_backend_optimization_level=N: the first call of the
XLA-compiled train step (trace and compile), the mean of the next 31 steps, and a hash
of the step's optimised HLO (the same at both levels: -O0 leaves XLA's own passes as
they are and changes only what LLVM does to the machine code). Levels alternate, so a
drift of the machine's speed falls on both.
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import hashlib, json, sys, time
    import numpy as np, keras, tensorflow as tf
    from keras_saat import Captioner
    from keras_saat.text import Vocabulary
    from keras_saat.training.trainer import Trainer

    words = "a red blue circle square at the top left on right".split()
    vocab = Vocabulary.build([words])
    keras.utils.set_random_seed(1)
    model = Captioner(vocab.words, attention=sys.argv[1], feature_dim=16, embedding_dim=8,
                      lstm_units=12, attention_units=8, dropout=0.0, seed=1)
    trainer = Trainer(model, keras.optimizers.Adam(1e-3), clipnorm=5.0, jit_compile=True,
                      log=lambda m: None)
    rng = np.random.default_rng(0)
    captions = [list(rng.choice(words, size=rng.integers(2, 6))) for _ in range(256)]
    data = tf.data.Dataset.from_tensor_slices({
        "features": rng.normal(size=(256, 64, 128)).astype("float32"),
        "tokens": vocab.encode_batch(captions, 6)}).batch(8)
    batches = list(data)
    start = time.perf_counter()
    trainer.train_step(batches[0])["loss"].numpy()
    first = time.perf_counter() - start
    start = time.perf_counter()
    for batch in batches[1:]:
        loss = trainer.train_step(batch)["loss"]
    loss.numpy()
    step = (time.perf_counter() - start) / (len(batches) - 1)
    hlo = trainer._step_fn.experimental_get_compiler_ir(batches[0])(stage="optimized_hlo")
    print("ROW " + json.dumps({"first_call_s": round(first, 2), "step_ms": round(1000 * step, 2),
                               "loss": float(loss), "hlo_md5": hashlib.md5(hlo.encode()).hexdigest()}))
    """
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="write the rows here (JSON)")
    args = parser.parse_args()
    from benchmarks.harness.runner import machine

    rows = []
    for repeat in range(args.repeats):
        for attention in ("soft", "hard"):
            for level in (3, 0):
                env = {
                    **os.environ,
                    "TF_CPP_MIN_LOG_LEVEL": "3",
                    "XLA_FLAGS": f"--xla_backend_optimization_level={level}",
                }
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, attention],
                    capture_output=True, text=True, env=env, check=False,
                )  # fmt: skip
                line = [r for r in done.stdout.splitlines() if r.startswith("ROW ")]
                if not line:
                    raise SystemExit(
                        f"the {attention} run at -O{level} failed:\n{done.stderr[-3000:]}"
                    )
                row = {"attention": attention, "llvm_level": level, "repeat": repeat}
                row.update(json.loads(line[0][4:]))
                rows.append(row)
                print(row, flush=True)
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"machine": machine(), "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
