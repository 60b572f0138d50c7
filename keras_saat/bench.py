"""`keras-saat bench`: speed and memory against this machine's limit, measured in one run.

Each part runs in a fresh Python process, so its peak resident memory is its own
and no compiled function or cache carries over between parts:

    matmul    fp32 matmul throughput of TensorFlow on this CPU (the limit)
    train     train-step throughput at the tutorial and paper sizes, soft and hard,
              with and without XLA, against an analytic FLOP count (`train_step_flops`)
    extract   feature extraction (read, decode, resize, backbone, write) against the
              bare backbone forward, EfficientNetB0 and VGG16, weights=None
    decode    greedy and beam-3 captions/s from cached features (tutorial size)
    serving   the exported SavedModel (EfficientNetB0 at 224, beam 3) run by a TF1
              Session, as TF Serving runs it: one-JPEG latency and batch-32 throughput
    malloc    the soft train step at both sizes with glibc's malloc tuned and with its
              defaults (KERAS_SAAT_MALLOC=system), alternating fresh processes: step
              time, page faults a step and peak memory (keras_saat/memory.py)

Timings are medians over repeats after a warm-up. No test asserts on them: the
machines are shared and noisy, so compare ratios measured in one run.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The two sizes of the benchmark issue. attention_units (not fixed by the issue) = D.
SIZES = {
    "tutorial": dict(
        backbone="inceptionv3", locations=64, channels=2048, feature_dim=256,
        embedding_dim=256, lstm_units=512, attention_units=256, vocab=5001, length=20, batch=64,
    ),
    "paper": dict(
        backbone="vgg16", locations=196, channels=512, feature_dim=512,
        embedding_dim=512, lstm_units=1000, attention_units=512, vocab=10000, length=20, batch=64,
    ),
}  # fmt: skip


def forward_flops(size):
    """Multiply-adds x 2 of one teacher-forced forward pass over a batch.

    Per caption (L locations, C channels, D annotation size, A attention units,
    m embedding, n LSTM units, K vocabulary, T steps):
        squeeze        2 L C D             Dense(D) on every location
        W_a a          2 L D A             projected once per image
        f_init h, c    2 x 2 D n
        per step:
          W_h h        2 n A
          scores       3 L A               add, tanh (counted as 1), v^T
          context      2 L D               sum_i alpha_i a_i
          gate         2 n                 f_beta
          LSTM         2 (m + D + n) 4n    Eq. 1 (embedding part hoisted, same count)
          deep output  2 (n m + D m) + 2 m K   Eq. 7
    Element-wise work (softmax, gates' nonlinearities, the loss) is left out.
    """
    L, C, D = size["locations"], size["channels"], size["feature_dim"]
    A, m, n = size["attention_units"], size["embedding_dim"], size["lstm_units"]
    K, T = size["vocab"], size["length"]
    per_image = 2 * L * C * D + 2 * L * D * A + 4 * D * n
    per_step = (
        2 * n * A + 3 * L * A + 2 * L * D + 2 * n + 2 * (m + D + n) * 4 * n
        + 2 * (n * m + D * m) + 2 * m * K
    )  # fmt: skip
    return size["batch"] * (per_image + T * per_step)


def train_step_flops(size):
    """A training step: forward plus backward, counted as 3 x the forward (backward = 2 x)."""
    return 3 * forward_flops(size)


def _median(values):
    values = sorted(values)
    return values[len(values) // 2]


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ the parts
def _matmul_timer(n=2048):
    """A function that times one fp32 n x n matmul and returns its GFLOP/s."""
    import tensorflow as tf

    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    matmul = tf.function(lambda x, y: tf.matmul(x, y))
    matmul(a, b).numpy()

    def timed():
        start = time.perf_counter()
        matmul(a, b).numpy()
        return 2 * n**3 / (time.perf_counter() - start) / 1e9

    return timed


def part_matmul(n=2048, repeats=10):
    timed = _matmul_timer(n)
    return {"matmul_gflops": _median([timed() for _ in range(repeats)]), "n": n}


def _captioner(size, attention, backbone=None):
    from keras_saat import Captioner

    words = ["<pad>", "<unk>", "<start>", "<end>"] + [f"w{i}" for i in range(size["vocab"] - 4)]
    return Captioner(
        words,
        backbone=backbone or size["backbone"],
        feature_dim=size["feature_dim"],
        embedding_dim=size["embedding_dim"],
        lstm_units=size["lstm_units"],
        attention_units=size["attention_units"],
        attention=attention,
        max_length=size["length"],
        seed=0,
    )


def _random_batch(size, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    B, T = size["batch"], size["length"]
    tokens = rng.integers(4, size["vocab"], size=(B, T + 1)).astype("int32")
    tokens[:, 0] = 2  # <start>
    tokens[:, -1] = 3  # <end>: every caption is T tokens long, no padding
    features = rng.normal(size=(B, size["locations"], size["channels"])).astype("float32")
    return {"features": features, "tokens": tokens}


def part_train(size_name, attention, xla, steps=10):
    """Train-step throughput. Each timed step is followed by a timed 2048^3 matmul in the
    same process, so `fraction_of_limit` compares the step with the limit as it was at
    that moment: the machines are shared, and their speed drifts by 10-20 % in minutes.
    """
    import keras
    import tensorflow as tf

    from keras_saat.training.trainer import Trainer

    size = SIZES[size_name]
    model = _captioner(size, attention)
    trainer = Trainer(
        model, keras.optimizers.Adam(1e-4), clipnorm=5.0, jit_compile=xla, log=lambda _: None
    )
    batch = {k: tf.constant(v) for k, v in _random_batch(size).items()}
    start = time.perf_counter()
    trainer.train_step(batch)["loss"].numpy()  # trace and compile
    compile_seconds = time.perf_counter() - start
    trainer.train_step(batch)["loss"].numpy()
    matmul = _matmul_timer()
    times, limits, faults = [], [], []
    for _ in range(steps):
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        trainer.train_step(batch)["loss"].numpy()
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
        limits.append(matmul())
    seconds = _median(times)
    gflops = train_step_flops(size) / seconds / 1e9
    limit = _median(limits)
    return {
        "size": size_name,
        "attention": attention,
        "xla": bool(trainer.jit_compile),
        "captions_per_s": size["batch"] / seconds,
        "step_ms": 1000 * seconds,
        "gflops": gflops,
        "matmul_gflops": limit,
        "fraction_of_limit": gflops / limit,
        "compile_s": compile_seconds,
        "page_faults_per_step": _median(faults),
    }


def write_jpegs(folder, count, seed=0):
    """A Karpathy-format dataset of `count` 256x256 JPEG scenes, all in the train split."""
    import numpy as np
    from PIL import Image

    from keras_saat.data import read_karpathy
    from keras_saat.data.shapes import reference_captions, render, sample_objects

    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    images = []
    for i in range(count):
        objects = sample_objects(rng)
        pixels = Image.fromarray(render(objects, rng)).resize((256, 256), Image.BILINEAR)
        pixels.save(folder / "images" / f"{i:06d}.jpg", quality=90)
        captions = [{"raw": c} for c in reference_captions(objects)]
        images.append(
            {
                "filepath": "images",
                "filename": f"{i:06d}.jpg",
                "split": "train",
                "sentences": captions,
            }
        )
    for split in ("val", "test"):  # the reader wants all three splits; one image each
        images.append({**images[0], "split": split})
    (folder / "dataset.json").write_text(json.dumps({"dataset": "bench", "images": images}))
    return read_karpathy(folder / "dataset.json")


def measure_extraction(backbone, count=256, batch_size=32, shard_size=1000):
    """Extraction images/s against the bare compiled encoder on the same images."""
    import numpy as np
    import tensorflow as tf

    from keras_saat.data.feature_cache import extract_features
    from keras_saat.data.images import decode_image
    from keras_saat.encoders import ImageEncoder

    encoder = ImageEncoder(backbone)
    size = encoder.image_size
    with tempfile.TemporaryDirectory() as tmp:
        dataset = write_jpegs(Path(tmp), count)
        records = dataset.split("train")
        pixels = np.stack(
            [decode_image(tf.io.read_file(str(r.path)), size).numpy() for r in records]
        )
        encode = encoder.compiled("float16")  # the function extraction uses
        encode(tf.constant(pixels[:batch_size]))  # trace and warm up

        def bare_forward():
            start = time.perf_counter()
            for i in range(0, count, batch_size):
                encode(tf.constant(pixels[i : i + batch_size])).numpy()
            return count / (time.perf_counter() - start)

        before = bare_forward()
        start = time.perf_counter()
        extract_features(
            encoder,
            dataset,
            Path(tmp) / "cache",
            splits=("train",),
            shard_size=shard_size,
            batch_size=batch_size,
            log=lambda _: None,
        )
        full = count / (time.perf_counter() - start)
        after = bare_forward()
        bare = (before + after) / 2  # the machine is shared: bracket the extraction
    return {
        "backbone": backbone,
        "images": count,
        "images_per_s": full,
        "bare_before": before,
        "bare_after": after,
        "bare_images_per_s": bare,
        "ratio": full / bare,
    }


# Images per extraction run. A run has a fixed cost (tracing the decode pipeline, filling
# the first batch: about 0.3 s), which at 64 images is a fifth of EfficientNetB0's run
# (ratio 0.77-0.79 at 64 images against 0.90-0.91 at 256, 2026-11-22). A real
# extraction is thousands of images, so the fast backbone gets 256; VGG16's run is long
# enough at 64 (13 s).
EXTRACT_IMAGES = {"efficientnetb0": 256, "vgg16": 64}


def part_extract(backbone, images=None):
    return measure_extraction(backbone, images or EXTRACT_IMAGES[backbone], batch_size=32)


def part_decode(repeats=3):
    import numpy as np

    size = SIZES["tutorial"]
    model = _captioner(size, "soft")
    features = np.random.default_rng(0).normal(
        size=(size["batch"], size["locations"], size["channels"])
    )
    result = {}
    for name, beam in (("greedy", 1), ("beam3", 3)):
        model.decode(features, beam_size=beam)["tokens"].numpy()  # compile
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = model.decode(features, beam_size=beam)
            out["tokens"].numpy()
            times.append(time.perf_counter() - start)
        result[f"{name}_captions_per_s"] = size["batch"] / _median(times)
        result[f"{name}_mean_length"] = float(np.mean(out["lengths"]))
    return result


def part_serving(requests=50, batches=8):
    import numpy as np
    import tensorflow as tf

    from keras_saat.config import DecodeConfig, ExportConfig
    from keras_saat.serving.export import export_model
    from keras_saat.serving.saved_model import encoder_chunk

    size = SIZES["tutorial"]
    model = _captioner(size, "soft", backbone="efficientnetb0")
    rng = np.random.default_rng(0)
    jpegs = [
        tf.io.encode_jpeg(rng.integers(0, 256, (320, 480, 3), dtype=np.uint8)).numpy()
        for _ in range(32)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        export = ExportConfig()
        path = export_model(
            model, tmp, DecodeConfig(beam_size=3, max_length=size["length"]), export,
            log=lambda _: None,
        )  # fmt: skip
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
            signature = meta_graph.signature_def["serving_default"]
            feed = signature.inputs["image_bytes"].name
            fetches = {k: v.name for k, v in signature.outputs.items()}
            for _ in range(3):  # warm-up
                session.run(fetches, {feed: jpegs[:1]})
            latency = []
            for i in range(requests):
                start = time.perf_counter()
                session.run(fetches, {feed: jpegs[i % 32 : i % 32 + 1]})
                latency.append(time.perf_counter() - start)
            session.run(fetches, {feed: jpegs})
            batch_times = []
            for _ in range(batches):
                start = time.perf_counter()
                session.run(fetches, {feed: jpegs})
                batch_times.append(time.perf_counter() - start)
    return {
        "p50_ms": 1000 * float(np.percentile(latency, 50)),
        "p99_ms": 1000 * float(np.percentile(latency, 99)),
        "batch32_images_per_s": 32 / _median(batch_times),
        "encoder_chunk": encoder_chunk(export),
        "fold_batch_norms": export.fold_batch_norms,
    }


PARTS = {
    "matmul": part_matmul,
    "train": part_train,
    "extract": part_extract,
    "decode": part_decode,
    "serving": part_serving,
    "malloc": part_train,  # run both ways by run_all
}

# Fresh processes per size and malloc setting in the malloc part, alternating.
MALLOC_ROUNDS = 3


def run_part(name, *args):
    """Runs one part here and returns its result with this process's peak RSS."""
    from keras_saat.encoders.image_encoder import onednn_enabled
    from keras_saat.memory import malloc_tuned

    result = PARTS[name](*args)
    result["peak_rss_mb"] = _peak_rss_mb()
    result["onednn"] = onednn_enabled()
    result["malloc_tuned"] = malloc_tuned()
    return result


def _run_in_subprocess(name, *args, env=None):
    # The part runs as the command line runs: malloc tuned first (keras_saat/memory.py).
    code = (
        "import json, sys; from keras_saat.memory import tune_malloc; tune_malloc(); "
        "from keras_saat.bench import run_part; "
        "print('BENCH ' + json.dumps(run_part(*json.loads(sys.argv[1]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps([name, *args])],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )
    for line in done.stdout.splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError(f"bench part {name} {args} failed:\n{done.stderr[-3000:]}")


def run_all(parts=None, log=print):
    """Every part, each in a fresh process; returns the issue's JSON layout."""
    parts = parts or list(PARTS)
    report = {"machine": _machine()}
    rss = {}
    settings = {"onednn": set(), "malloc_tuned": set()}

    def _in_subprocess(name, *args):  # notes the kernels and the malloc settings it ran with
        row = _run_in_subprocess(name, *args)
        for key, seen in settings.items():
            seen.add(row.pop(key))
        return row

    if "matmul" in parts:
        matmul = _in_subprocess("matmul")
        report["matmul_gflops"] = matmul["matmul_gflops"]
        rss["matmul"] = matmul["peak_rss_mb"]
        log(f"matmul fp32 {matmul['n']}x{matmul['n']}: {matmul['matmul_gflops']:.1f} GFLOP/s")
    if "train" in parts:
        report["train"] = []
        for size in SIZES:
            for attention in ("soft", "hard"):
                for xla in (True, False):
                    row = _in_subprocess("train", size, attention, xla)
                    rss[f"train_{size}_{attention}_{'xla' if xla else 'noxla'}"] = row.pop(
                        "peak_rss_mb"
                    )
                    report["train"].append(row)
                    log(
                        f"train {size:8s} {attention} xla={row['xla']!s:5s}: "
                        f"{row['captions_per_s']:7.1f} captions/s, {row['gflops']:6.1f} GFLOP/s "
                        f"({row['fraction_of_limit']:.2f} of the limit, "
                        f"{row['matmul_gflops']:.0f} GFLOP/s alongside)"
                    )
    if "extract" in parts:
        report["extract"] = []
        for backbone in ("efficientnetb0", "vgg16"):
            row = _in_subprocess("extract", backbone)
            rss[f"extract_{backbone}"] = row.pop("peak_rss_mb")
            report["extract"].append(
                {
                    k: row[k]
                    for k in ("backbone", "images", "images_per_s", "bare_images_per_s", "ratio")
                }
            )
            log(
                f"extract {backbone} ({row['images']} images): {row['images_per_s']:.1f} img/s, bare "
                f"{row['bare_images_per_s']:.1f} img/s, ratio {row['ratio']:.2f}"
            )
    if "decode" in parts:
        row = _in_subprocess("decode")
        rss["decode"] = row.pop("peak_rss_mb")
        report["decode"] = row
        log(
            f"decode tutorial size, batch 64: greedy {row['greedy_captions_per_s']:.0f} captions/s, "
            f"beam 3 {row['beam3_captions_per_s']:.0f} captions/s "
            f"(mean length {row['greedy_mean_length']:.1f} tokens)"
        )
    if "serving" in parts:
        row = _in_subprocess("serving")
        rss["serving"] = row.pop("peak_rss_mb")
        report["serving"] = row
        log(
            f"serving EfficientNetB0 224, beam 3: p50 {row['p50_ms']:.0f} ms, p99 "
            f"{row['p99_ms']:.0f} ms, batch 32 {row['batch32_images_per_s']:.1f} images/s"
        )
    if "malloc" in parts:
        report["malloc"] = measure_malloc(log)
    report["peak_rss_mb"] = rss
    # TF_ENABLE_ONEDNN_OPTS=1 (TensorFlow's default on AVX512-VNNI CPUs) changes every number,
    # and so does glibc's malloc (keras_saat/memory.py; KERAS_SAAT_MALLOC=system turns it off).
    for key, seen in settings.items():
        report[key] = seen.pop() if len(seen) == 1 else sorted(seen)
    return report


def measure_malloc(log=print, rounds=MALLOC_ROUNDS):
    """The soft train step with malloc tuned and with glibc's defaults, in alternating
    fresh processes; per size, the medians of each setting and their ratio."""
    from keras_saat.memory import OPT_OUT

    settings = {"tuned": {}, "system": {OPT_OUT: "system"}}
    rows, summary = [], []
    for size in SIZES:
        runs = {name: [] for name in settings}
        for _ in range(rounds):
            for name, env in settings.items():
                row = _run_in_subprocess("train", size, "soft", False, env=env)
                row["malloc"] = name
                runs[name].append(row)
                rows.append(row)
        medians = {
            name: {
                key: _median([r[key] for r in runs[name]])
                for key in ("step_ms", "page_faults_per_step", "peak_rss_mb", "fraction_of_limit")
            }
            for name in settings
        }
        summary.append(
            {
                "size": size,
                **{f"{name}_{k}": v for name, values in medians.items() for k, v in values.items()},
                "step_ratio_system_to_tuned": medians["system"]["step_ms"]
                / medians["tuned"]["step_ms"],
            }
        )
        log(
            f"malloc {size:8s}: tuned {medians['tuned']['step_ms']:.0f} ms a step, "
            f"{medians['tuned']['page_faults_per_step']:.0f} faults, "
            f"{medians['tuned']['peak_rss_mb']:.0f} MB peak; system "
            f"{medians['system']['step_ms']:.0f} ms, "
            f"{medians['system']['page_faults_per_step']:.0f} faults, "
            f"{medians['system']['peak_rss_mb']:.0f} MB (medians of {rounds} processes each)"
        )
    return {"rounds": rounds, "summary": summary, "runs": rows}


def _machine():
    import platform

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def write_report(report, path):
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
