"""`keras-saat serve` over REST with a trained Shapes workdir's export: latency of one
image, throughput of batches, and how often the bfloat16 export gives the float32
export's caption.

    python -m benchmarks.serve_rest --workdir runs/demo [--requests 100] [--batch 32]
        [--out FILE.jsonl]

Exports the workdir's model twice into one model base (version 1 float32, version 2
`--precision bfloat16`). First the float32 SavedModel is called in this process, one
test image a call, on the PNG's bytes (`serving_default`: header checks, decode and
beam search in the graph) and on its pixels (`serving_pixels`), p50 over REQUESTS calls
(`in_process`; the pixels are the PNG's own, so the test images must be at the model's
size, as the Shapes world's are). Then each version is served in turn by `keras-saat
serve` and timed from this process over the loopback: one test PNG a request, p50 and
p90 over REQUESTS requests after 5 warm-up ones, cycling through the test split; and
REQUESTS // 10 requests of BATCH PNGs one after another, after one warm-up, as images
a second. Then every test image is captioned by both versions and the share of identical
captions recorded. The client is `keras_saat.serving.RestClient` (standard library
HTTP, base64 JSON): its encoding and parsing are in the REST times, as for any REST
client. A refused image stops the run. With --out, the row is appended as one JSON line.
"""

import argparse
import contextlib
import io
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keras_saat(*args):
    command = [sys.executable, "-m", "keras_saat.cli", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")


@contextlib.contextmanager
def serving(base, version):
    """`keras-saat serve` of one version of the model base; yields its URL."""
    from keras_saat.serving import RestClient

    port = free_port()
    log = tempfile.TemporaryFile("w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "keras_saat.cli", "serve", "--model-base", str(base),
         "--port", str(port), "--name", "captioner", "--model-version", str(version)],
        stdout=subprocess.DEVNULL, stderr=log, text=True,
    )  # fmt: skip
    url, started = f"http://127.0.0.1:{port}", time.perf_counter()
    try:
        while True:
            try:
                RestClient(url, "captioner").status()
                break
            except Exception:
                if server.poll() is not None or time.perf_counter() - started > 300:
                    server.kill()
                    server.wait()
                    log.seek(0)
                    sys.exit(f"the server did not start:\n{log.read()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def in_process(version, images, count):
    """p50 ms of the SavedModel's two signatures called in this process, one image a call:
    `serving_default` on a PNG's bytes (decoded and checked in the graph) and
    `serving_pixels` on the same image's pixels: what the server adds is the rest."""
    import tensorflow as tf
    from PIL import Image

    loaded = tf.saved_model.load(str(version))
    by_bytes, by_pixels = loaded.signatures["serving_default"], loaded.signatures["serving_pixels"]
    encoded = [tf.constant([image]) for image in images]
    pixels = [
        tf.constant(np.asarray(Image.open(io.BytesIO(image)).convert("RGB"), np.float32)[None])
        for image in images
    ]  # the Shapes world's scenes are at the model's size already
    one = latencies(lambda i: by_bytes(image_bytes=encoded[i % len(images)]), count)
    raw = latencies(lambda i: by_pixels(pixels=pixels[i % len(images)]), count)
    return {
        "png_bytes_p50_ms": ms(one, 50),
        "pixels_p50_ms": ms(raw, 50),
    }


def checked(rows):
    """The server's answer rows, or an exit naming the first image it refused."""
    for row in rows:
        if not row["valid"]:
            sys.exit(f"the server refused a test image: {row['error']}")
    return rows


def ms(times, percent):
    """The percentile of `times` (seconds) in milliseconds, two decimals."""
    return round(1000 * float(np.percentile(times, percent)), 2)


def latencies(call, count, warmup=5):
    for _ in range(warmup):
        call(0)
    times = []
    for i in range(count):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return np.asarray(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a trained workdir")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", help="append the JSON row to this file")
    args = parser.parse_args()

    from benchmarks.harness.runner import machine
    from keras_saat.experiment.preparation import load_dataset
    from keras_saat.experiment.trained_models import trained_model
    from keras_saat.serving import RestClient

    workdir = Path(args.workdir).resolve()
    _, config, _ = trained_model(workdir)
    records = load_dataset(config, workdir, log=lambda *_: None).split("test")
    images = [r.path.read_bytes() for r in records]

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "captioner"
        keras_saat("export", "--workdir", workdir, "--out", base, "--model-version", 1)
        keras_saat(
            "export", "--workdir", workdir, "--out", base, "--model-version", 2,
            "--precision", "bfloat16",
        )  # fmt: skip
        row = {
            "row": "keras-saat serve, REST, one PNG a request and batches",
            "workdir": str(workdir.name),
            "test_images": len(images),
            "requests": args.requests,
            "machine": machine(),
        }
        row["in_process"] = in_process(base / "1", images, args.requests)
        print("the float32 SavedModel in this process", row["in_process"], flush=True)
        captions = {}
        for version, precision in ((1, "float32"), (2, "bfloat16")):
            with serving(base, version) as url:
                client = RestClient(url, "captioner")
                one = latencies(
                    lambda i, client=client: checked(client.caption(images[i % len(images)])),
                    args.requests,
                )
                size, batches = min(args.batch, len(images)), max(1, args.requests // 10)

                def batch(i, client=client, size=size):
                    start = (i * size) % (len(images) - size + 1)
                    checked(client.caption(images[start : start + size]))

                many = latencies(batch, batches, warmup=1)
                row[precision] = {
                    "one_image_p50_ms": ms(one, 50),
                    "one_image_p90_ms": ms(one, 90),
                    f"batch_{size}_images_per_s": round(size * batches / float(many.sum()), 1),
                }
                captions[precision] = [
                    r["caption"]
                    for start in range(0, len(images), size)
                    for r in checked(client.caption(images[start : start + size]))
                ]
                print(precision, row[precision], flush=True)
        same = sum(a == b for a, b in zip(*captions.values(), strict=True))
        row["bfloat16_captions_identical"] = same / len(images)
        print(f"bfloat16 captions identical to float32's: {same} of {len(images)}")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
