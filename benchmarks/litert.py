"""LiteRT files against the SavedModel: size, load time and per-image latency on this CPU.

    python -m benchmarks.litert --workdir runs/demo [--beam-size 3] [--out FILE.json]

Exports the workdir's model as a SavedModel and as .tflite files (float32, float16
and int8 weights), then for each: the size on disk, the time to load it ready to
run (a fresh `tf.saved_model.load`; the interpreter built and its tensors
allocated), and the latency of captioning one image, p50 and p90 over 50 calls
after 5 warm-up calls (the SavedModel through its `serving_pixels` signature, so
both take pixels). The interpreter runs with 2 threads, as the machine has 2 cores.
Then the share of the test split's captions each .tflite file gives as the model
itself does (`Captioner.decode`, same beam size), and as the float32 file does.
"""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def folder_size(path):
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def latency(call, runs=50, warmup=5):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.percentile(times, 50)), 1000 * float(np.percentile(times, 90))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()

    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from benchmarks.harness.runner import machine
    from keras_saat.experiment import export_workdir

    scratch = Path(tempfile.mkdtemp(prefix="litert-bench-"))
    rows = []
    try:
        beam = [f"decode.beam_size={args.beam_size}"]
        version = export_workdir(args.workdir, scratch / "sm", 1, beam, log=lambda *_: None)
        start = time.perf_counter()
        loaded = tf.saved_model.load(str(version))
        serve = loaded.signatures["serving_pixels"]
        size = json.loads((version / "assets.extra" / "keras_saat.json").read_text())["image_size"]
        pixels = np.random.default_rng(0).uniform(0, 255, (1, size, size, 3)).astype(np.float32)
        serve(pixels=tf.constant(pixels))
        load = time.perf_counter() - start
        p50, p90 = latency(lambda: serve(pixels=tf.constant(pixels)))
        rows.append(
            {"format": "savedmodel", "quantize": "none", "mb": folder_size(version) / 1e6,
             "load_s": load, "p50_ms": p50, "p90_ms": p90}
        )  # fmt: skip
        for quantize in ("none", "float16", "int8"):
            settings = [*beam, "export.format=litert", f"export.quantize={quantize}"]
            path = export_workdir(
                args.workdir, scratch / quantize, None, settings, log=lambda *_: None
            )
            start = time.perf_counter()
            interpreter = Interpreter(model_path=str(path), num_threads=2)
            runner = interpreter.get_signature_runner("serving_default")
            runner(pixels=pixels)
            load = time.perf_counter() - start
            p50, p90 = latency(lambda runner=runner: runner(pixels=pixels))
            rows.append(
                {"format": "litert", "quantize": quantize, "mb": folder_size(path) / 1e6,
                 "load_s": load, "p50_ms": p50, "p90_ms": p90}
            )  # fmt: skip
        agreement(args.workdir, scratch, args.beam_size, rows)
        for row in rows:
            row.update(beam_size=args.beam_size, image_size=size)
            print(
                json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
            )
        if args.out:
            for row in rows:
                row["machine"] = machine()
            Path(args.out).write_text(json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def agreement(workdir, scratch, beam_size, rows):
    """Adds same_as_model and same_as_float32 (shares of test images) to the LiteRT rows."""
    from keras_saat.experiment.preparation import load_dataset
    from keras_saat.experiment.trained_models import trained_model
    from keras_saat.export.litert import run_litert

    model, config, _ = trained_model(workdir)
    records = load_dataset(config, workdir, log=lambda *_: None).split("test")
    pixels = model.preprocessor()([r.path for r in records])
    model.decode_jit_compile = False
    expected = model.decode(model.encoder.compiled()(pixels), beam_size=beam_size)["tokens"].numpy()
    tokens = {}
    for row in rows[1:]:
        path = scratch / row["quantize"] / "keras_saat.tflite"
        tokens[row["quantize"]] = run_litert(path, pixels)["tokens"]
        row["same_as_model"] = float((tokens[row["quantize"]] == expected).all(axis=1).mean())
        row["same_as_float32"] = float(
            (tokens[row["quantize"]] == tokens["none"]).all(axis=1).mean()
        )
        row["images"] = len(records)


if __name__ == "__main__":
    main()
