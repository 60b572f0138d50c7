"""The parts that time the model's compute: the matmul limit, the train step, decoding,
and the device they run on (the step's profile: `profiling`)."""

import resource
import time

from benchmarks.harness.runner import median, on_gpu
from benchmarks.harness.sizes import SIZES, captioner, train_setup, train_step_flops


def matmul_timer(n=None, precision="float32"):
    """A function that times n x n matmuls in `precision` and returns GFLOP/s.

    On a GPU one timing is 20 chained matmuls of n = 8192 (one is too short to time);
    on a CPU one matmul of n = 2048.
    """
    import tensorflow as tf

    gpu = on_gpu()
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


def measure_matmul(n=None, repeats=10, precision="float32"):
    """The matmul limit in `precision`: the best and the median of `repeats` timings (the
    machines are shared, and a median alone moves by 2x within minutes)."""
    timed = matmul_timer(n, precision)
    values = [timed() for _ in range(repeats)]
    return {
        "matmul_gflops": max(values),
        "median_gflops": median(values),
        "n": n or (8192 if on_gpu() else 2048),
        "precision": precision,
    }


def measure_train(
    size_name,
    attention,
    xla,
    steps=10,
    precision="float32",
    batch_size=None,
    unroll=True,
    one_executable="auto",
    fused=None,
):
    """Train-step throughput. Each timed step is followed by a timed matmul in the step's
    precision in the same process, so `fraction_of_limit` compares the step with the limit
    as it was at that moment: the machines are shared, and their speed drifts by 10-20 % in
    minutes. The best of those matmuls is the limit (their median is reported beside it).

    `trace_s` is Python tracing of the step and its gradient; `compile_s` is the rest of
    the first call (XLA's compile, or graph optimisation without XLA); `first_step_s` is
    this function's start (TensorFlow's import, when it is the process's first) to the
    end of the first step. `unroll` is the trainer's teacher-forcing form, and
    `one_executable` and `fused` its `one_executable` and `fused_scores` (`Trainer`).
    """
    entered = time.perf_counter()
    size = dict(SIZES[size_name], batch=batch_size or SIZES[size_name]["batch"])
    trainer, batch = train_setup(size, attention, xla, precision, unroll, one_executable, fused)
    start = time.perf_counter()
    trainer.trace(batch)
    trace_seconds = time.perf_counter() - start
    start = time.perf_counter()
    trainer.train_step(batch)["loss"].numpy()  # compile
    compile_seconds = time.perf_counter() - start
    first_step_seconds = time.perf_counter() - entered
    trainer.train_step(batch)["loss"].numpy()
    matmul = matmul_timer(precision=precision)
    times, limits, faults = [], [], []
    for _ in range(steps):
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        trainer.train_step(batch)["loss"].numpy()
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
        limits.append(matmul())
    seconds = median(times)
    gflops = train_step_flops(size) / seconds / 1e9
    limit = max(limits)
    return {
        "size": size_name,
        "attention": attention,
        "precision": precision,
        "batch": size["batch"],
        "xla": bool(trainer.jit_compile),
        "unroll": trainer.unroll,
        "one_executable": trainer.whole_step_compiled(trainer.jit_compile),
        "fused_scores": bool(trainer.model.decoder.fused_scores),
        "captions_per_s": size["batch"] / seconds,
        "step_ms": 1000 * seconds,
        "gflops": gflops,
        "matmul_gflops": limit,
        "matmul_median_gflops": median(limits),
        "fraction_of_limit": gflops / limit,
        "trace_s": trace_seconds,
        "compile_s": compile_seconds,
        "first_step_s": first_step_seconds,
        "page_faults_per_step": median(faults),
    }


def measure_decode(repeats=3, precision="float32", batch_size=None):
    """Greedy and beam-3 captions/s from features already on the device, as `generate`
    has them (the backbone's output). `feed_ms` is what a NumPy float64 batch would add
    to each call: the cast to float32 and the copy to the device, kept out of the decode's
    own timing."""
    import numpy as np
    import tensorflow as tf

    size = dict(SIZES["tutorial"], batch=batch_size or SIZES["tutorial"]["batch"])
    model = captioner(size, "soft", precision=precision)
    host = np.random.default_rng(0).normal(
        size=(size["batch"], size["locations"], size["channels"])
    )  # float64, as NumPy makes it
    feeds = []
    for _ in range(repeats):
        start = time.perf_counter()
        features = tf.identity(tf.convert_to_tensor(host, tf.float32))  # on the device
        float(tf.reduce_sum(features[0, 0]))
        feeds.append(time.perf_counter() - start)
    result = {"feed_ms": 1000 * median(feeds)}
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
        result[f"{name}_captions_per_s"] = size["batch"] / median(times)
        result[f"{name}_mean_length"] = float(np.mean(out["lengths"]))
    result["precision"] = precision
    result["batch"] = size["batch"]
    return result


def measure_device():
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
