"""What the tests share: paths, small models and decoders, and image and dataset builders.

Test modules import from here (and from `tests.reference`, the NumPy reference of the
paper's equations), never from each other.
"""

import io
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_saat import Captioner
from keras_saat.layers import LSTMDecoder
from keras_saat.runtime.precision import dtype_policy
from keras_saat.text import Vocabulary

# A YAML config of the library's defaults, for `keras-saat train --config` in tests.
DEFAULTS = str(Path(__file__).parent / "configs" / "defaults.yaml")

# The checkout: the working folder of tests that start `python -c` children.
ROOT = Path(__file__).parents[1]

# Debian's chromium and chromedriver, for the browser tests (`make test` installs them).
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def headless_chrome(width=1200, height=1000):
    """A headless Chromium driven by Selenium (the caller quits it)."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)


# The tutorial notebooks whose pages must show figures, and at least how many.
TUTORIAL_FIGURES = {
    "01_encoder": 1,
    "03_training_fit": 1,
    "04_decoding_evaluation": 1,
    "06_export_serving": 1,
}

# The pytest-xdist group of the executed notebooks and of the site built from them
# (`make test` runs with --dist loadgroup): the notebooks share one trained model, and
# the site reuses their executed copies, so they run on one worker, in order.
TUTORIALS = pytest.mark.xdist_group("tutorials")

# ------------------------------------------------------------------ models
WORDS = "a red blue circle square at the top left on right".split()

# The teacher-forced outputs `decoder_run` probes, and their last dimension.
PROBED = {"logits": 13, "alphas": 9, "betas": None}


def small_model(attention="soft", **kwargs):
    vocab = Vocabulary.build([WORDS])
    settings = dict(feature_dim=16, embedding_dim=8, lstm_units=12, attention_units=8, seed=1)
    settings.update(kwargs)
    return Captioner(vocab.words, attention=attention, **settings), vocab


def decoder_run(
    attention, gating, unroll, compiled, steps=5, precision="float32", fused_scores=False
):
    """Loss, gradients (annotations first) and outputs of one probed teacher-forced pass
    (also the decoder run of test_stacked_matmul.py and test_attention_scores.py)."""
    with dtype_policy(precision):
        decoder = LSTMDecoder(
            13, embedding_dim=6, lstm_units=7, attention_units=5, attention=attention,
            gating=gating, dropout=0.3, seed=3, unroll=unroll, fused_scores=fused_scores,
            name="decoder",
        )  # fmt: skip
        decoder.build(4)
    rng = np.random.default_rng(1)
    for weight in decoder.trainable_weights:
        weight.assign(rng.normal(0.0, 0.4, weight.shape).astype("float32"))
    annotations = tf.constant(rng.normal(size=(8, 9, 4)), decoder.compute_dtype)
    ids = tf.constant(rng.integers(0, 13, (8, steps)), tf.int32)
    probe = {
        k: tf.constant(rng.normal(size=(8, steps) + ((n,) if n else ())), tf.float32)
        for k, n in PROBED.items()
    }

    def run():
        with tf.GradientTape() as tape:
            tape.watch(annotations)
            out = decoder(annotations, ids, training=True)
            loss = sum(tf.reduce_sum(tf.cast(out[k], tf.float32) * probe[k]) for k in probe)
        grads = tape.gradient(loss, [annotations, *decoder.trainable_weights])
        return loss, [tf.cast(tf.convert_to_tensor(g), tf.float32) for g in grads], out

    if compiled is not None:
        run = tf.function(run, jit_compile=compiled)
    loss, grads, out = run()
    names = ["annotations"] + [w.path for w in decoder.trainable_weights]
    return loss.numpy(), dict(zip(names, [g.numpy() for g in grads], strict=True)), out


# ------------------------------------------------------------------ datasets
def coco_captions_examples(self, split, decoders=None, **kwargs):
    """`as_dataset` for mock_data: 3 examples per split in coco_captions' structure.

    TFDS 4.9.10's random mock cannot generate coco_captions (random Sequence lengths,
    unordered boxes and Sequence(Text) values that from_generator rejects), so the
    examples are made here with the real keys, dtypes and PNG image bytes.
    """
    rng = np.random.default_rng(len(split))
    base = {"train": 0, "restval": 100, "val": 200, "test": 300}[split]
    pngs = [tf.io.encode_png(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)) for _ in range(3)]
    captions = [[f"A {split} picture number {k}." for k in range(5)] for _ in range(3)]
    captions[1][2] = " . "  # empty after tokenisation: skipped and counted
    examples = {
        "image": tf.stack(pngs),
        "image/id": tf.constant([base + i for i in range(3)], tf.int64),
        "image/filename": tf.constant([f"COCO_{split}_{i}.jpg" for i in range(3)]),
        "captions": {
            "text": tf.constant(captions),
            "id": tf.constant(np.arange(15).reshape(3, 5), tf.int64),
        },
    }
    ds = tf.data.Dataset.from_tensor_slices(examples)
    if not (decoders and "image" in decoders):
        ds = ds.map(lambda ex: {**ex, "image": tf.io.decode_png(ex["image"], channels=3)})
    return ds


# ------------------------------------------------------------------ images: good and bad
# encoded images (made with Pillow, forged by hand)
def encode(fmt, size=(40, 30), mode="RGB", seed=0, **options):
    """A random image of `size` (width, height) encoded as `fmt` by Pillow."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, fmt, **options)
    return buffer.getvalue()


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def forged_png(width, height):
    """A PNG whose IHDR declares width x height, with a few bytes of image data."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\x00" * 1000)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", data)
        + _chunk(b"IEND", b"")
    )


def forged_jpeg(width, height):
    """A real JPEG whose frame header (SOF) is rewritten to declare width x height."""
    data = bytearray(encode("JPEG"))
    pos = 2
    while data[pos + 1] not in (0xC0, 0xC1, 0xC2):
        pos += 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]
    data[pos + 5 : pos + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def forged_gif(width, height, screen=(10, 10), frames=1):
    """A GIF whose logical screen says `screen` and whose frames declare width x height."""
    frame = (
        b"\x2c" + struct.pack("<HHHH", 0, 0, width, height) + b"\x00"  # descriptor, no table
        + b"\x02" + b"\x02\x4c\x01" + b"\x00"  # LZW code size, one sub-block, end
    )  # fmt: skip
    screen_and_table = struct.pack("<HHBBB", *screen, 0x80, 0, 0) + b"\x00" * 6  # 2 colours
    return b"GIF89a" + screen_and_table + frame * frames + b"\x3b"


def forged_bmp(width, height):
    info = struct.pack("<IiiHHIIiiII", 40, width, -height, 1, 24, 0, 0, 0, 0, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54 + 16, 0, 0, 54) + info + b"\x00" * 16


def gif_of_frames(frames):
    """One GIF holding the first frame of each of `frames` (GIF bytes from `encode`)."""

    def blocks(data):
        flags, pos = data[10], 13
        table = 3 * (2 << (flags & 7)) if flags & 0x80 else 0
        head, pos = data[: pos + table], pos + table
        found = []
        while data[pos] != 0x3B:
            start = pos
            if data[pos] == 0x21:
                pos += 2
            else:  # an image descriptor: its local table and LZW code size byte follow
                local = 3 * (2 << (data[pos + 9] & 7)) if data[pos + 9] & 0x80 else 0
                pos += 11 + local
            while data[pos]:
                pos += data[pos] + 1
            pos += 1
            found.append(data[start:pos])
        return head, [block for block in found if block[0] == 0x2C]

    head, _ = blocks(frames[0])
    images = []
    for frame in frames:
        frame_head, frame_blocks = blocks(frame)
        table = frame_head[13:]
        block = bytearray(frame_blocks[0])
        if table:  # move the frame's global table into its descriptor, as a local one
            block[9] = 0x80 | (frame_head[10] & 7)
            block = block[:10] + table + block[10:]
        images.append(bytes(block))
    screen = bytearray(head[:13])
    screen[10] &= 0x7F  # no global table: every frame carries its own
    return bytes(screen) + b"".join(images) + b"\x3b"


GOOD = {
    "png": lambda: encode("PNG"),
    "jpeg": lambda: encode("JPEG", quality=95),
    "progressive jpeg": lambda: encode("JPEG", progressive=True),
    "gif": lambda: encode("GIF"),
    "bmp": lambda: encode("BMP"),
    "grey png": lambda: encode("PNG", mode="L"),
    "rgba png": lambda: encode("PNG", mode="RGBA"),
}

BAD = {
    "empty": (lambda: b"", "empty image bytes"),
    "text": (lambda: b"hello, not an image", "not an image"),
    "truncated jpeg": (lambda: encode("JPEG")[:400], "truncated or corrupt"),
    "jpeg cut in its header": (lambda: encode("JPEG")[:90], "no frame header"),
    "truncated png": (lambda: encode("PNG")[:80], "truncated or corrupt"),
    "png header only": (lambda: encode("PNG")[:20], "truncated PNG header"),
    "tiff": (lambda: encode("TIFF"), "unsupported image format TIFF"),
    "webp": (lambda: encode("WEBP"), "unsupported image format WebP"),
    "png bomb": (lambda: forged_png(60000, 60000), "declares 60000x60000 pixels"),
    "jpeg bomb": (lambda: forged_jpeg(60000, 60000), "declares 60000x60000 pixels"),
    "gif bomb": (lambda: forged_gif(60000, 60000), "declares 60000x60000 pixels"),
    "gif bomb behind a small screen": (lambda: forged_gif(3000, 9000), "declares 3000x9000"),
    "gif of many frames": (lambda: forged_gif(2000, 2000, frames=7), "7 frames hold 28000000"),
    "bmp bomb": (lambda: forged_bmp(60000, 60000), "declares 60000x60000 pixels"),
    "zero-size png": (lambda: forged_png(0, 10), "zero width or height"),
}


def cap_address_space(headroom):
    """One line of Python that caps the process running it (RLIMIT_AS) at the address
    space it has held so far plus `headroom` bytes: put it after the imports and warm-up
    of a child process, so an allocation of gigabytes fails instead of being made."""
    return (
        "import resource; _cap = int(open('/proc/self/status').read().split('VmPeak:')[1]"
        f".split()[0]) * 1024 + {int(headroom)}; "
        "resource.setrlimit(resource.RLIMIT_AS, (_cap, _cap))"
    )


def run_capped_cases(names, warm="", headroom_mb=1024, timeout=120):
    """Runs the hostile cases `names` (tests.support.hostile_cases), one after the other, in a
    child process whose address space is capped at what it holds after `warm` (code run
    first: the imports the loaders need) plus `headroom_mb`, within `timeout` seconds.

    Returns (exit status or "timeout", {name: the answer it gave}, the end of stderr): a
    case that crashed the child or ran it out of time is missing from the answers.
    """
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import json, resource, sys, tempfile
        from pathlib import Path
        from tests.support.hostile_cases import hostile_cases
        {warm}
        cases = {{c.name: c for c in hostile_cases()}}
        {cap_address_space(headroom_mb * 1024 * 1024)}
        for name in {list(names)!r}:
            with tempfile.TemporaryDirectory() as scratch:
                answer = cases[name].run(Path(scratch))
            print("ANSWER " + json.dumps([name, answer]), flush=True)
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired as expired:
        done = subprocess.CompletedProcess(
            [], "timeout", expired.stdout or "", expired.stderr or ""
        )
        done.stdout = done.stdout.decode() if isinstance(done.stdout, bytes) else done.stdout
        done.stderr = done.stderr.decode() if isinstance(done.stderr, bytes) else done.stderr
    answers = dict(
        json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("ANSWER ")
    )
    return done.returncode, answers, done.stderr[-2000:]


def sparse_images(folder, count, images=()):
    """Paths (str) of `count` PNG-headed files just under the 64 MiB read bound (sparse, so
    free on disk) with the real `images` in the middle: a batch of them is gigabytes."""
    from keras_saat.images.image_files import MAX_FILE_BYTES

    paths = []
    for i in range(count):
        path = Path(folder) / f"big-{i:02d}.png"
        with open(path, "wb") as out:
            out.write(b"\x89PNG\r\n\x1a\n")
            out.truncate(MAX_FILE_BYTES - 1)
        paths.append(str(path))
    paths[count // 2 : count // 2] = [str(p) for p in images]
    return paths


def shapes_caption_csv(shapes_dir, out):
    """A CSV of our own (image,caption,split), from the Shapes world's images and captions."""
    import csv
    import json

    dataset = json.loads((shapes_dir / "dataset_shapes.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    path = out / "captions.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "caption", "split"])
        for image in dataset["images"]:
            for sentence in image["sentences"]:
                where = shapes_dir / "images" / image["filename"]
                writer.writerow([where, " ".join(sentence["tokens"]), image["split"]])
    return path


KILLED_WRITE = """
import os, signal, sys
from keras_saat.io_utils import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half a file")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_write(path):
    """Writes `path` through `atomic_path` in a child killed (SIGKILL) mid-write; returns
    the temporary it leaves beside `path`."""
    import subprocess
    import sys

    before = set(Path(path).parent.iterdir())
    done = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(path)], cwd=ROOT)
    assert done.returncode == -9
    (left,) = set(Path(path).parent.iterdir()) - before
    return left
