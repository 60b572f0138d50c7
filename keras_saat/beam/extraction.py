"""ExtractFeatures: the feature cache's shards, written by a Beam pipeline from the
shard lists and encoder weights the driver (`extraction_runs`) leaves in CACHE/.beam;
each shard's record goes beside them for the driver to fold into index.json."""

import collections
import io
import json
import zipfile
from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import (
    KeyedModelHandler,
    ModelHandler,
    PredictionResult,
    RunInference,
)

from keras_saat.beam.captioning import _exception_line
from keras_saat.beam.model_handler import fixed_batches
from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import atomic_path, write_bytes_atomic

BEAM_DIR = ".beam"  # in the cache folder, while a Beam extraction runs
ENCODER_WEIGHTS = "encoder-{}.npz"
# A shard's list of images and its record once written, in BEAM_DIR.
LIST_SUFFIX, DONE_SUFFIX = ".txt", ".json"

Image = collections.namedtuple("Image", "path imgid")  # what `image_place` names


class EncodeBatch:
    """The frozen encoder as a plain callable: (B, S, S, 3) pixels -> (B, L, C) features
    in the cache dtype (Beam's large_model proxy forwards calls, not attributes)."""

    def __init__(self, encode):
        self._encode = encode

    def __call__(self, pixels):
        return self._encode(pixels).numpy()


class EncoderHandler(ModelHandler):
    """RunInference's model: the frozen ImageEncoder, rebuilt and fingerprint-checked on
    each worker from the weights the driver saved (the handler itself pickles).

    Args:
        backbone, image_size: the encoder's registry name and input side.
        weights: str. The .npz of the encoder's weights (`save_encoder_weights`).
        dtype, resize, compression: the cache's settings, part of `fingerprint` (int8: the
            encoder computes float32, each row is quantised as it is written).
        fingerprint: str. The cache's encoder fingerprint.
        policy: str. Keras dtype policy the encoder was built under. Defaults to "float32".
        batch_size, large_model: as `fixed_batches`. Defaults to 32 and False.
    """

    def __init__(self, backbone, image_size, weights, dtype, resize, fingerprint,
                 policy="float32", batch_size=32, large_model=False,
                 compression="none"):  # fmt: skip
        super().__init__(**fixed_batches(batch_size, large_model))
        self._settings = (str(backbone), int(image_size), str(weights), str(dtype), str(resize))
        self._compression = str(compression)
        self._fingerprint, self._policy = str(fingerprint), str(policy)

    def load_model(self):
        import keras

        from keras_saat.data.feature_cache.cache_format import encoder_fingerprint, format_name
        from keras_saat.encoders.image_encoder import ImageEncoder

        backbone, image_size, weights, dtype, resize = self._settings
        keras.config.set_dtype_policy(self._policy)
        encoder = ImageEncoder(backbone, image_size, None)
        try:  # a file of other arrays is refused as one of other values is (below)
            with open(weights, "rb") as stream:
                saved = np.load(io.BytesIO(stream.read()))
                arrays = [saved[f"w{i}"] for i in range(len(saved.files))]
            encoder.feature_model.set_weights(arrays)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            raise KerasSaatError(
                f"{weights} does not hold the encoder's weights ({type(err).__name__}); "
                "run the command again to write it anew"
            ) from None
        found = encoder_fingerprint(encoder, resize, format_name(dtype, self._compression))
        if found != self._fingerprint:
            raise KerasSaatError(
                f"the encoder rebuilt from {weights} has fingerprint {found}, not the cache's "
                f"{self._fingerprint}: the workers need the launcher's TensorFlow and Keras"
            )
        return EncodeBatch(encoder.compiled("float32" if dtype == "int8" else dtype))

    def run_inference(self, batch, model, inference_args=None):
        return [PredictionResult(None, row) for row in model(np.stack(batch))]

    def get_num_bytes(self, batch):
        return sum(x.nbytes for x in batch)

    def get_metrics_namespace(self):
        return "keras_saat"


def save_encoder_weights(encoder, directory, fingerprint):
    """Writes the encoder's weights to CACHE/.beam, anew each run; returns the path."""
    path = Path(directory) / BEAM_DIR / ENCODER_WEIGHTS.format(fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **{f"w{i}": w for i, w in enumerate(encoder.feature_model.get_weights())})
    return str(path)


def write_shard_list(directory, split, number, file, images, inputs):
    """CACHE/.beam/<file>.txt: a JSON header {split, shard, file, inputs (the launcher's
    `shard_inputs`)}, then [position, imgid, path] a line for each of `images`."""
    lines = [json.dumps({"split": split, "shard": number, "file": file, "inputs": inputs})]
    lines += [json.dumps([p, r.imgid, str(r.path)]) for p, r in images]
    path = Path(directory) / BEAM_DIR / (file + LIST_SUFFIX)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))


def read_shard_list(directory, file):
    """(header dict, {position: Image}) of a shard's list."""
    path = Path(directory) / BEAM_DIR / (file + LIST_SUFFIX)
    header, *rows = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    images = {position: Image(image, imgid) for position, imgid, image in map(json.loads, rows)}
    return json.loads(header), images


def _shard_images(file, directory):
    """A shard file's name -> ((file, position), path) for each of its images."""
    _, images = read_shard_list(directory, file)
    for position, image in images.items():
        yield (file, position), image.path


class _DecodeImage(beam.DoFn):
    """((file, position), path) -> ((file, position), pixels), decoded as the one-process
    path decodes; an unread file becomes a skip, an undecodable image gives nothing."""

    def __init__(self, size, resize):
        self._size, self._resize = int(size), str(resize)

    def process(self, element):
        from keras_saat.data.feature_cache.cache_index import file_skip_reason
        from keras_saat.images.decoding import load_image

        (file, position), path = element
        reason = file_skip_reason(path)
        if reason:
            yield beam.pvalue.TaggedOutput("skipped", (file, ("skip", position, reason)))
            return
        try:  # one graph traced once a worker process, not decode_image's ops one by one
            pixels = load_image(path, self._size, self._resize)
        except KerasSaatError:
            return
        yield (file, position), pixels


def _row(element):
    (file, position), result = element
    return file, ("row", position, result.inference)


def _failed(failure):
    """A batch the encoder raised on: a skip for each of its images."""
    batch, exception = failure
    reason = f"the encoder raised {_exception_line(exception)}"
    for (file, position), _ in batch if isinstance(batch, list) else [batch]:
        yield file, ("skip", position, reason)


class _WriteShard(beam.DoFn):
    """(file, items) -> the shard file, written whole, then its record in CACHE/.beam."""

    def __init__(self, directory, dtype="float16", compression="none"):
        self._directory = str(directory)
        self._format = (str(dtype), str(compression))

    def process(self, element):
        import tensorflow as tf

        from keras_saat.data.feature_cache.cache_format import (
            feature_example,
            shard_content,
            shard_inputs,
        )
        from keras_saat.data.feature_cache.cache_index import image_place, skipped_entries
        from keras_saat.data.readers.caption_dataset import ImageRecord, Skips

        file, items = element
        items = list(items)  # read twice; a runner's grouped values may be a one-pass iterable
        directory = Path(self._directory)
        header, images = read_shard_list(directory, file)
        rows = sorted((item[1], item[2]) for item in items if item[0] == "row")
        skips = Skips()
        for item in items:
            if item[0] == "skip":
                skips.add(item[2], image_place(images[item[1]]))
        with atomic_path(directory / file) as tmp:  # a retried bundle writes its own
            with tf.io.TFRecordWriter(str(tmp)) as writer:
                for position, row in rows:
                    writer.write(feature_example(position, row, *self._format))
        written = [position for position, _ in rows]
        split = header["split"]
        records = [ImageRecord(i.imgid, Path(i.path), split, []) for _, i in sorted(images.items())]
        content = shard_content(records)  # stats each file now, before and after its read
        if shard_inputs(records, fresh=True) != header["inputs"]:  # changed since the launch
            content = None
        entry = {
            "split": header["split"],
            "shard": header["shard"],
            "inputs": header["inputs"],
            "content": content,
            "written": len(written),
            "skipped": skipped_entries(images, images, written, skips),
            "skips": dict(skips.where),
        }
        write_bytes_atomic(directory / BEAM_DIR / (file + DONE_SUFFIX), json.dumps(entry).encode())
        yield entry


class ExtractFeatures(beam.PTransform):
    """Shard file names -> the shards written into the cache folder, and one record
    (dict: split, shard, written, skipped [[position, reason]], skips {reason: [image]})
    a shard. Needs CACHE/.beam prepared by `extract_features_beam`; images and batches
    that fail become the shard's skips, never a failed bundle.

    Args:
        directory: str. The cache folder, as the workers see it.
        handler: EncoderHandler.
        image_size, resize, dtype, compression: the encoder's input side and the cache's
            settings.
    """

    def __init__(self, directory, handler, image_size, resize="crop", dtype="float16",
                 compression="none"):  # fmt: skip
        super().__init__()
        self._directory, self._handler = str(directory), handler
        self._size, self._resize = int(image_size), str(resize)
        self._format = (str(dtype), str(compression))

    def expand(self, files):
        images = (
            files
            | "Images" >> beam.FlatMap(_shard_images, self._directory)
            | "SpreadImages" >> beam.Reshuffle()
        )
        decode = beam.ParDo(_DecodeImage(self._size, self._resize))
        decoded = images | "Decode" >> decode.with_outputs("skipped", main="pixels")
        results, dead = (
            decoded.pixels
            | "Encode" >> RunInference(KeyedModelHandler(self._handler)).with_exception_handling()
        )
        rows = results | "Rows" >> beam.Map(_row)
        failed = dead.failed_inferences | "Failed" >> beam.FlatMap(_failed)
        # Every shard reaches its writer, one whose images all fail (or none) included.
        marks = files | "Marks" >> beam.Map(lambda file: (file, ("mark",)))
        return (
            (rows, failed, decoded.skipped, marks)
            | "All" >> beam.Flatten()
            | "ByShard" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(_WriteShard(self._directory, *self._format))
        )


__all__ = ["EncoderHandler", "ExtractFeatures", "save_encoder_weights", "write_shard_list"]
