"""`keras-saat bench`: speed and memory against this machine's limit, measured in one run.

Each part runs in a fresh Python process, so its peak resident memory is its own
and no compiled function or cache carries over between parts:

    device    the GPU (name, compute capability) and whether the CPU computes bfloat16;
              it decides the precisions (float32, and bfloat16 where the hardware has
              it: `resolve_precision("auto")`) and the GPU or CPU plan below
    matmul    matmul throughput in each precision (the limit): the best of 10 timings
              and their median; n = 2048 on a CPU, 20 chained n = 8192 on a GPU
    train     train-step throughput against an analytic FLOP count (`train_step_flops`)
              and a matmul of the step's precision timed alongside: `train_plan`
              (CPU: both sizes, soft and hard, XLA on and off, every precision; GPU:
              XLA in every precision at batch 64 and 512, one row without XLA)
    batches   the batch/throughput curve: paper size, soft, best precision
    profile   the train step's op time by op type (TensorFlow's profiler), per size and
              precision: which ops hold a precision back
    input     captions/s the training input pipeline delivers from a feature cache on
              disk at the paper size, per_caption and per_image batches, 64 and 512:
              compare with the train rows to see which one limits a run
    extract   feature extraction (read, decode, resize, backbone, write) against the
              bare backbone forward, EfficientNetB0 and VGG16, weights=None, per precision
    decode    greedy and beam-3 captions/s from features on the device (tutorial size),
              per precision (and batch 512 on a GPU), and feed_ms: what casting a
              NumPy float64 batch and copying it to the device would add to each call
    serving   the exported SavedModel (EfficientNetB0 at 224, beam 3) run by a TF1
              Session, as TF Serving runs it: one-JPEG latency and batch-32
              throughput; "serving" is the float32 export, "serving_bfloat16" the
              `--precision bfloat16` one
    malloc    the soft train step at both sizes with glibc's malloc tuned and with its
              defaults (KERAS_SAAT_MALLOC=system), alternating fresh processes: step
              time, page faults a step and peak memory (keras_saat/runtime/memory.py)

Timings are medians over repeats after a warm-up. No test asserts on them: the
machines are shared and noisy, so compare ratios measured in one run.
"""

import json
import os
import re
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
def _on_gpu():
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def _matmul_timer(n=None, precision="float32"):
    """A function that times n x n matmuls in `precision` and returns GFLOP/s.

    On a GPU one timing is 20 chained matmuls of n = 8192 (one is too short to time);
    on a CPU one matmul of n = 2048.
    """
    import tensorflow as tf

    gpu = _on_gpu()
    n = n or (8192 if gpu else 2048)
    repeats = 20 if gpu else 1
    dtype = (
        tf.bfloat16
        if precision == "bfloat16"
        else tf.float16
        if precision == "float16"
        else tf.float32
    )
    a = tf.cast(tf.random.normal([n, n]) / n**0.5, dtype)
    b = tf.cast(tf.random.normal([n, n]) / n**0.5, dtype)

    @tf.function
    def matmul(x, y):
        for _ in range(repeats):
            x = tf.matmul(x, y)
        return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

    matmul(a, b).numpy()

    def timed():
        start = time.perf_counter()
        matmul(a, b).numpy()
        return repeats * 2 * n**3 / (time.perf_counter() - start) / 1e9

    return timed


def part_matmul(n=None, repeats=10, precision="float32"):
    """The matmul limit in `precision`: the best and the median of `repeats` timings (the
    machines are shared: a median alone moved between 202 and 442 GFLOP/s in minutes)."""
    timed = _matmul_timer(n, precision)
    values = [timed() for _ in range(repeats)]
    return {
        "matmul_gflops": max(values),
        "median_gflops": _median(values),
        "n": n or (8192 if _on_gpu() else 2048),
        "precision": precision,
    }


def _captioner(size, attention, backbone=None, precision="float32"):
    from keras_saat import Captioner
    from keras_saat.runtime.precision import dtype_policy

    words = ["<pad>", "<unk>", "<start>", "<end>"] + [f"w{i}" for i in range(size["vocab"] - 4)]
    with dtype_policy(precision):
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


def part_train(
    size_name, attention, xla, steps=10, precision="float32", batch_size=None, unroll=True
):
    """Train-step throughput. Each timed step is followed by a timed matmul in the step's
    precision in the same process, so `fraction_of_limit` compares the step with the limit
    as it was at that moment: the machines are shared, and their speed drifts by 10-20 % in
    minutes. The best of those matmuls is the limit (their median is reported beside it).

    `trace_s` is Python tracing of the step and its gradient; `compile_s` is the rest of
    the first call (XLA's compile, or graph optimisation without XLA). `unroll` is the
    trainer's teacher-forcing form (`Trainer`).
    """
    import keras
    import tensorflow as tf

    from keras_saat.training.trainer import Trainer

    size = dict(SIZES[size_name], batch=batch_size or SIZES[size_name]["batch"])
    model = _captioner(size, attention, precision=precision)
    optimizer = keras.optimizers.Adam(1e-4)
    if precision == "float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = Trainer(
        model, optimizer, clipnorm=5.0, jit_compile=xla, log=lambda _: None, unroll=unroll
    )
    batch = {k: tf.constant(v) for k, v in _random_batch(size).items()}
    start = time.perf_counter()
    trainer.trace(batch)
    trace_seconds = time.perf_counter() - start
    start = time.perf_counter()
    trainer.train_step(batch)["loss"].numpy()  # compile
    compile_seconds = time.perf_counter() - start
    trainer.train_step(batch)["loss"].numpy()
    matmul = _matmul_timer(precision=precision)
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
    limit = max(limits)
    return {
        "size": size_name,
        "attention": attention,
        "precision": precision,
        "batch": size["batch"],
        "xla": bool(trainer.jit_compile),
        "unroll": trainer.unroll,
        "captions_per_s": size["batch"] / seconds,
        "step_ms": 1000 * seconds,
        "gflops": gflops,
        "matmul_gflops": limit,
        "matmul_median_gflops": _median(limits),
        "fraction_of_limit": gflops / limit,
        "trace_s": trace_seconds,
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


def measure_extraction(backbone, count=256, batch_size=32, shard_size=1000, precision="float32"):
    """Extraction images/s against the bare compiled encoder on the same images."""
    import numpy as np
    import tensorflow as tf

    from keras_saat.data.feature_cache import extract_features
    from keras_saat.data.images import decode_image
    from keras_saat.encoders import ImageEncoder
    from keras_saat.runtime.precision import dtype_policy

    with dtype_policy(precision):
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
        "precision": precision,
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


def part_extract(backbone, images=None, precision="float32"):
    return measure_extraction(
        backbone, images or EXTRACT_IMAGES[backbone], batch_size=32, precision=precision
    )


def part_decode(repeats=3, precision="float32", batch_size=None):
    """Greedy and beam-3 captions/s from features already on the device, as `generate`
    has them (the backbone's output). `feed_ms` is what a NumPy float64 batch would add
    to each call: the cast to float32 and the copy to the device, which the 2026-11-23
    H100 rows timed with the decode (their captions/s did not grow with the batch)."""
    import numpy as np
    import tensorflow as tf

    size = dict(SIZES["tutorial"], batch=batch_size or SIZES["tutorial"]["batch"])
    model = _captioner(size, "soft", precision=precision)
    host = np.random.default_rng(0).normal(
        size=(size["batch"], size["locations"], size["channels"])
    )  # float64, as NumPy makes it
    feeds = []
    for _ in range(repeats):
        start = time.perf_counter()
        features = tf.identity(tf.convert_to_tensor(host, tf.float32))  # on the device
        float(tf.reduce_sum(features[0, 0]))
        feeds.append(time.perf_counter() - start)
    result = {"feed_ms": 1000 * _median(feeds)}
    for name, beam in (("greedy", 1), ("beam3", 3)):
        start = time.perf_counter()
        model.decode(features, beam_size=beam)["tokens"].numpy()  # compile
        result[f"{name}_compile_s"] = time.perf_counter() - start
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = model.decode(features, beam_size=beam)
            out["lengths"].numpy()
            times.append(time.perf_counter() - start)
        result[f"{name}_captions_per_s"] = size["batch"] / _median(times)
        result[f"{name}_mean_length"] = float(np.mean(out["lengths"]))
    result["precision"] = precision
    result["batch"] = size["batch"]
    return result


def _op_key(name, by):
    if by == "type":
        return name.split(":")[-1]
    return re.sub(r"_\d+(?=/|:|$)", "", name)  # "while/MatMul_13:MatMul" -> "while/MatMul:MatMul"


def op_times(size_name, attention="soft", xla=False, steps=2, by="type", precision="float32"):
    """Where a train step's time goes: `tf.profiler.experimental` around `steps` steps of
    the train part, its `tf_Compute` thread events summed by op type (or by op name with
    the unrolled loop's step numbers taken out: `by="name"`), in ms a step.

    The events of the inter-op threads overlap, so the sums are op time, not wall time:
    use them to rank ops and compare runs (`benchmarks/profile_train_step.py` prints them).
    """
    import collections
    import glob

    import keras
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from keras_saat.training.trainer import Trainer

    size = SIZES[size_name]
    model = _captioner(size, attention, precision=precision)
    trainer = Trainer(
        model, keras.optimizers.Adam(1e-4), clipnorm=5.0, jit_compile=xla, log=lambda _: None
    )
    batch = {k: tf.constant(v) for k, v in _random_batch(size).items()}
    for _ in range(2):
        trainer.train_step(batch)["loss"].numpy()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            trainer.train_step(batch)["loss"].numpy()
        tf.profiler.experimental.stop()
        path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
        space = xplane_pb2.XSpace()
        space.ParseFromString(Path(path).read_bytes())
    totals = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if line.name.startswith("tf_Compute"):
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    totals[_op_key(name, by)] += event.duration_ps / 1e9 / steps
    return totals


def part_profile(size_name, precision, steps=3, top=12):
    """The train step's op time by op type (soft attention, batch 64, no XLA), in one
    precision: compare the op types' shares between precisions to see which ops hold
    one back (the profiler slows the step; captions/s come from the train rows)."""
    totals = op_times(size_name, steps=steps, precision=precision)
    return {
        "size": size_name,
        "precision": precision,
        "op_ms": {k: round(v, 2) for k, v in totals.most_common(top)},
        "all_ops_ms": round(sum(totals.values()), 1),
    }


def write_synthetic_cache(folder, images, size, captions_per_image=5, seed=0):
    """A feature cache of `images` random float16 (L, C) rows of `size`, in shards of 1,000
    as extraction writes them, and records with Shapes captions: the input bench's data."""
    import numpy as np
    import tensorflow as tf

    from keras_saat.data.dataset import ImageRecord
    from keras_saat.data.shapes import reference_captions, sample_objects

    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    side = int(round(size["locations"] ** 0.5))
    shards = []
    for first in range(0, images, 1000):
        name = f"train-{len(shards):05d}.tfrecord"
        positions = range(first, min(first + 1000, images))
        with tf.io.TFRecordWriter(str(folder / name)) as writer:
            for position in positions:
                row = rng.standard_normal((size["locations"], size["channels"]), np.float32)
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "position": tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[position])
                            ),
                            "features": tf.train.Feature(
                                bytes_list=tf.train.BytesList(
                                    value=[row.astype(np.float16).tobytes()]
                                )
                            ),
                        }
                    )
                )
                writer.write(example.SerializeToString())
        shards.append({"file": name, "done": True, "written": len(positions), "skipped": []})
    index = {
        "grid": [side, side],
        "channels": size["channels"],
        "dtype": "float16",
        "splits": {"train": {"shards": shards}},
    }
    (folder / "index.json").write_text(json.dumps(index))
    records = []
    for position in range(images):
        captions = reference_captions(sample_objects(rng))[:captions_per_image]
        records.append(ImageRecord(position, None, "train", captions))
    return records


def part_input(size_name, batching, batch_size, images=1000, epochs=2):
    """Captions/s that the training input pipeline delivers from a feature cache on disk
    (read, parse, tokenise, shuffle, batch; `data.batching` per_caption or per_image), at
    `size_name`'s features, with the trainer's settings (shuffle buffer 5000 captions)."""
    import tensorflow as tf

    from keras_saat.data.feature_cache import FeatureCache
    from keras_saat.data.input_pipeline import (
        caption_dataset,
        captions_per_image,
        image_group_dataset,
    )
    from keras_saat.text.vocabulary import Vocabulary

    size = SIZES[size_name]
    with tempfile.TemporaryDirectory() as tmp:
        records = write_synthetic_cache(Path(tmp) / "cache", images, size)
        cache = FeatureCache(Path(tmp) / "cache")
        vocabulary = Vocabulary.build(c for r in records for c in r.references)
        per_image = captions_per_image(records)

        def dataset(epoch):
            if batching == "per_image":
                return image_group_dataset(
                    cache, "train", records, vocabulary, size["length"],
                    max(batch_size // per_image, 1), per_image, shuffle_buffer=5000 // per_image,
                    seed=epoch,
                )  # fmt: skip
            return caption_dataset(
                cache, "train", records, vocabulary, size["length"], batch_size,
                shuffle_buffer=5000, seed=epoch,
            )  # fmt: skip

        def captions_of(batch):
            tokens = batch["tokens"]
            return int(tf.reduce_sum(tf.cast(tf.reduce_any(tokens != 0, axis=-1), tf.int32)))

        for batch in dataset(0).take(2):  # trace the pipeline and open the files
            captions_of(batch)
        rates = []
        for epoch in range(1, epochs + 1):
            start, captions, host_bytes = time.perf_counter(), 0, 0
            for batch in dataset(epoch):
                captions += captions_of(batch)
                host_bytes += sum(v.shape.num_elements() * v.dtype.size for v in batch.values())
            seconds = time.perf_counter() - start
            rates.append((captions / seconds, host_bytes / captions))
    return {
        "size": size_name,
        "batching": batching,
        "batch": batch_size,
        "images": images,
        "captions_per_s": _median([r for r, _ in rates]),
        "bytes_per_caption": rates[0][1],
    }


def part_serving(requests=50, batches=8, precision="float32"):
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
        export = ExportConfig(precision=precision)
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
        "precision": precision,
    }


PARTS = {
    "matmul": part_matmul,
    "train": part_train,
    "extract": part_extract,
    "decode": part_decode,
    "serving": part_serving,
    "malloc": part_train,  # run both ways by run_all
    "input": part_input,
    "profile": part_profile,
    "batches": part_train,  # the batch/throughput curve, run by run_all
    "device": lambda: part_device(),  # what run_all plans by (always run)
}

# Fresh processes per size and malloc setting in the malloc part, alternating.
MALLOC_ROUNDS = 3


def part_device():
    """The accelerator and CPU the parts run on: GPU name and compute capability, and
    whether the CPU computes bfloat16 natively."""
    import tensorflow as tf

    from keras_saat.runtime.precision import cpu_has_bfloat16, resolve_precision

    gpus = tf.config.list_physical_devices("GPU")
    details = [tf.config.experimental.get_device_details(g) for g in gpus]
    return {
        "gpu": details[0].get("device_name") if details else None,
        "compute_capability": list(details[0].get("compute_capability", ())) if details else None,
        "gpus": len(gpus),
        "cpu_bfloat16": cpu_has_bfloat16(),
        "auto_precision": resolve_precision("auto"),
        "tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
    }


def run_part(name, *args):
    """Runs one part here and returns its result with this process's peak RSS."""
    from keras_saat.runtime.cpu_kernels import onednn_enabled
    from keras_saat.runtime.memory import malloc_tuned

    result = PARTS[name](*args)
    result["peak_rss_mb"] = _peak_rss_mb()
    result["onednn"] = onednn_enabled()
    result["malloc_tuned"] = malloc_tuned()
    return result


def _run_in_subprocess(name, *args, env=None):
    # The part runs as the command line runs: malloc tuned first (keras_saat/runtime/memory.py).
    code = (
        "import json, sys; from keras_saat.runtime.memory import tune_malloc; tune_malloc(); "
        "from keras_saat.runtime.xla import set_xla_defaults; set_xla_defaults(); "
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


# Batch sizes of the batch/throughput curve (paper size, soft attention, best precision).
BATCH_CURVE = {"gpu": (64, 128, 256, 512, 1024, 2048), "cpu": (16, 64, 256)}


def bench_precisions(device):
    """float32, and bfloat16 where the hardware computes it (`resolve_precision("auto")`)."""
    return ["float32"] + (["bfloat16"] if device["auto_precision"] == "bfloat16" else [])


def train_plan(device, precisions):
    """(size, attention, xla, precision, batch, unroll) of each train row.

    CPU: both sizes, soft and hard, with and without XLA, in every precision, batch 64,
    teacher forcing unrolled (the default).
    GPU: XLA in every precision at batch 64 and (paper size) 512, one float32 row without
    XLA per size, and hard attention at the paper size in the best precision; then the
    paper size in the best precision at batch 64 and 512 with teacher forcing in a
    `tf.while_loop` (`train.unroll: false`), beside the unrolled rows.
    """
    if not device["gpu"]:
        return [
            (size, attention, xla, precision, 64, True)
            for size in SIZES
            for attention in ("soft", "hard")
            for xla in (True, False)
            for precision in precisions
        ]
    plan = []
    for size in SIZES:
        plan.append((size, "soft", False, "float32", 64, True))
        plan += [(size, "soft", True, precision, 64, True) for precision in precisions]
    plan += [("paper", "soft", True, precision, 512, True) for precision in precisions]
    plan.append(("paper", "hard", True, precisions[-1], 64, True))
    plan += [("paper", "soft", True, precisions[-1], batch, False) for batch in (64, 512)]
    return plan


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

    device = _in_subprocess("device")
    device.pop("peak_rss_mb")
    report["device"] = device
    precisions = bench_precisions(device)
    capability = ".".join(str(v) for v in device["compute_capability"] or ())
    log(
        f"device: {device['gpu'] or 'CPU only'}"
        f"{f' (compute capability {capability})' if capability else ''}; "
        f"precisions {', '.join(precisions)}"
    )
    if "matmul" in parts:
        report["matmul"] = []
        for precision in precisions:
            matmul = _in_subprocess("matmul", None, 10, precision)
            rss[f"matmul_{precision}"] = matmul.pop("peak_rss_mb")
            report["matmul"].append(matmul)
            log(
                f"matmul {precision} {matmul['n']}x{matmul['n']}: best "
                f"{matmul['matmul_gflops']:.1f} GFLOP/s, median {matmul['median_gflops']:.1f}"
            )
        report["matmul_gflops"] = report["matmul"][0]["matmul_gflops"]  # float32, as before
    if "train" in parts:
        report["train"] = []
        for size, attention, xla, precision, batch, unroll in train_plan(device, precisions):
            row = _in_subprocess("train", size, attention, xla, 10, precision, batch, unroll)
            form = "" if unroll else "_loop"
            rss[
                f"train_{size}_{attention}_{'xla' if xla else 'noxla'}_{precision}_{batch}{form}"
            ] = row.pop("peak_rss_mb")
            report["train"].append(row)
            log(
                f"train {size:8s} {attention} {precision:8s} batch {batch:4d} "
                f"xla={row['xla']!s:5s}{'' if unroll else ' loop'}: "
                f"{row['captions_per_s']:8.1f} captions/s, "
                f"{row['gflops']:8.1f} GFLOP/s ({row['fraction_of_limit']:.2f} of the limit, "
                f"{row['matmul_gflops']:.0f} GFLOP/s alongside), trace {row['trace_s']:.1f}s, "
                f"first call {row['compile_s']:.1f}s"
            )
    if "batches" in parts:
        report["batches"] = []
        precision = precisions[-1]
        for batch in BATCH_CURVE["gpu" if device["gpu"] else "cpu"]:
            row = _in_subprocess(
                "train", "paper", "soft", bool(device["gpu"]), 10, precision, batch
            )
            row.pop("peak_rss_mb")
            report["batches"].append(row)
            log(
                f"batch curve, paper soft {precision} batch {batch:5d}: "
                f"{row['captions_per_s']:9.1f} captions/s, {row['gflops']:9.1f} GFLOP/s "
                f"({row['fraction_of_limit']:.3f} of the limit)"
            )
    if "input" in parts:
        report["input"] = []
        for batching in ("per_caption", "per_image"):
            for batch in (64, 512):
                row = _in_subprocess("input", "paper", batching, batch)
                rss[f"input_{batching}_{batch}"] = row.pop("peak_rss_mb")
                report["input"].append(row)
                log(
                    f"input paper {batching:11s} batch {batch:3d}: "
                    f"{row['captions_per_s']:9.0f} captions/s, "
                    f"{row['bytes_per_caption'] / 1024:.0f} KiB a caption to the step"
                )
    if "profile" in parts:
        report["profile"] = []
        for size in SIZES:
            for precision in precisions:
                row = _in_subprocess("profile", size, precision)
                rss[f"profile_{size}_{precision}"] = row.pop("peak_rss_mb")
                report["profile"].append(row)
                ops = ", ".join(f"{k} {v:.0f}" for k, v in list(row["op_ms"].items())[:6])
                log(
                    f"profile {size:8s} {precision:8s}: ops {row['all_ops_ms']:.0f} ms a step; {ops}"
                )
    if "extract" in parts:
        report["extract"] = []
        for backbone in ("efficientnetb0", "vgg16"):
            for precision in precisions:
                row = _in_subprocess("extract", backbone, None, precision)
                rss[f"extract_{backbone}_{precision}"] = row.pop("peak_rss_mb")
                keys = (
                    "backbone",
                    "precision",
                    "images",
                    "images_per_s",
                    "bare_images_per_s",
                    "ratio",
                )
                report["extract"].append({k: row[k] for k in keys})
                log(
                    f"extract {backbone} {precision} ({row['images']} images): "
                    f"{row['images_per_s']:.1f} img/s, bare {row['bare_images_per_s']:.1f} img/s, "
                    f"ratio {row['ratio']:.2f}"
                )
    if "decode" in parts:
        report["decode"] = []
        for precision in precisions:
            for batch in (64, 512) if device["gpu"] else (64,):
                row = _in_subprocess("decode", 3, precision, batch)
                rss[f"decode_{precision}_{batch}"] = row.pop("peak_rss_mb")
                report["decode"].append(row)
                log(
                    f"decode tutorial size, {precision}, batch {batch}: greedy "
                    f"{row['greedy_captions_per_s']:.0f} captions/s, beam 3 "
                    f"{row['beam3_captions_per_s']:.0f} captions/s "
                    f"(mean length {row['greedy_mean_length']:.1f} tokens; feeding the batch "
                    f"from NumPy float64 would add {row['feed_ms']:.0f} ms a call)"
                )
    if "serving" in parts:
        for precision in precisions:
            row = _in_subprocess("serving", 50, 8, precision)
            key = "serving" if precision == "float32" else f"serving_{precision}"
            rss[key] = row.pop("peak_rss_mb")
            report[key] = row
            log(
                f"serving EfficientNetB0 224, beam 3, {precision}: p50 {row['p50_ms']:.0f} ms, "
                f"p99 {row['p99_ms']:.0f} ms, batch 32 {row['batch32_images_per_s']:.1f} images/s"
            )
    if "malloc" in parts:
        report["malloc"] = measure_malloc(log)
    report["peak_rss_mb"] = rss
    # TF_ENABLE_ONEDNN_OPTS=1 (TensorFlow's default on AVX512-VNNI CPUs) changes every number,
    # and so does glibc's malloc (keras_saat/runtime/memory.py; KERAS_SAAT_MALLOC=system turns it off).
    for key, seen in settings.items():
        report[key] = seen.pop() if len(seen) == 1 else sorted(seen)
    return report


def measure_malloc(log=print, rounds=MALLOC_ROUNDS):
    """The soft train step with malloc tuned and with glibc's defaults, in alternating
    fresh processes; per size, the medians of each setting and their ratio."""
    from keras_saat.runtime.memory import OPT_OUT

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
