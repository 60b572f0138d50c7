"""The parts that time the data paths around the model: feature extraction, the
training input pipeline, and the exported SavedModel as TF Serving runs it."""

import json
import tempfile
import time
from pathlib import Path

from benchmarks.harness.runner import median
from benchmarks.harness.sizes import SIZES, captioner
from tests.support.synthetic_data import write_synthetic_cache


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

    from keras_saat.data.feature_cache.feature_extraction import extract_features
    from keras_saat.encoders import ImageEncoder
    from keras_saat.images.decoding import decode_image
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
# the first batch), a large share of a short run; a real extraction is thousands of
# images, so the fast backbone gets 256 and VGG16, whose run is long already, 64.
EXTRACT_IMAGES = {"efficientnetb0": 256, "vgg16": 64}


def measure_extract(backbone, images=None, precision="float32"):
    return measure_extraction(
        backbone, images or EXTRACT_IMAGES[backbone], batch_size=32, precision=precision
    )


def measure_input(size_name, batching, batch_size, images=1000, epochs=2, resident=False):
    """Captions/s that the training input path delivers from a feature cache on disk, at
    `size_name`'s features, with the trainer's settings (shuffle buffer 5000 captions;
    `data.batching` per_caption or per_image).

    Streamed (`resident` False): the tf.data pipeline reads, parses, tokenises, shuffles
    and batches the features on the host. Resident: the features are loaded onto the
    device once (`load_s`), the pipeline batches image indices and tokens, and each batch's
    rows are gathered on the device, as the train step gathers them: the time counts
    the gather; `index_captions_per_s` is one more epoch of the index batches alone (the
    host's share, when the gather runs on a GPU). `bytes_per_caption` is what crosses
    from the host to the step.
    """

    from keras_saat.data.feature_cache.feature_cache import FeatureCache
    from keras_saat.data.feature_cache.resident_features import ResidentFeatures
    from keras_saat.data.pipeline.batch_plan import BatchPlan
    from keras_saat.data.pipeline.input_pipeline import (
        caption_batches,
        captions_per_image,
        token_table,
    )
    from keras_saat.text.vocabulary import Vocabulary

    size = SIZES[size_name]
    with tempfile.TemporaryDirectory() as tmp:
        records = write_synthetic_cache(Path(tmp) / "cache", images, size)
        cache = FeatureCache(Path(tmp) / "cache")
        vocabulary = Vocabulary.build(c for r in records for c in r.references)
        per_image = captions_per_image(records)
        tokens_of = token_table(records, vocabulary, size["length"])
        start = time.perf_counter()
        source = ResidentFeatures(cache) if resident else cache
        load_seconds = time.perf_counter() - start

        def dataset(epoch):
            if batching == "per_image":
                plan = BatchPlan(
                    max(batch_size // per_image, 1),
                    per_image,
                    5000 // per_image,
                    epoch,
                    pad_remainder=True,  # as training's data.partial_batches pad
                )
            else:
                plan = BatchPlan(batch_size, shuffle_buffer=5000, seed=epoch, pad_remainder=True)
            return caption_batches(source, "train", records, tokens_of, plan)

        def captions_of(batch, gather=resident):
            count = int((batch["tokens"].numpy() != 0).any(axis=-1).sum())
            if gather:  # the rows the step reads, gathered where it runs; waits for them
                float(source.gather(batch["image_index"])[0, 0, 0])
            return count

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
        index_rate = None
        if resident:  # the host's share alone: the index batches, no gather
            start = time.perf_counter()
            captions = sum(captions_of(batch, gather=False) for batch in dataset(epochs + 1))
            index_rate = captions / (time.perf_counter() - start)
    return {
        "size": size_name,
        "batching": batching,
        "batch": batch_size,
        "images": images,
        "path": "resident" if resident else "streamed",
        "load_s": load_seconds if resident else None,
        "captions_per_s": median([r for r, _ in rates]),
        "index_captions_per_s": index_rate,
        "bytes_per_caption": rates[0][1],
    }


def measure_serving(requests=50, batches=8, precision="float32"):
    import numpy as np
    import tensorflow as tf

    from keras_saat.config import DecodeConfig, ExportConfig
    from keras_saat.export import export_model
    from keras_saat.export.saved_model import encoder_chunk
    from keras_saat.serving.signatures import DEFAULT_SIGNATURE

    size = SIZES["tutorial"]
    model = captioner(size, "soft", backbone="efficientnetb0")
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
            signature = meta_graph.signature_def[DEFAULT_SIGNATURE]
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
        "batch32_images_per_s": 32 / median(batch_times),
        "encoder_chunk": encoder_chunk(export),
        "fold_batch_norms": export.fold_batch_norms,
        "precision": precision,
    }
