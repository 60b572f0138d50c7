"""The SavedModel export format: the whole captioning pipeline, image decoding to caption
words, as one graph of core TF ops that stock TensorFlow Serving runs.

    BASE/<version>/saved_model.pb, variables/
    BASE/<version>/assets.extra/tf_serving_warmup_requests   (PredictionLog TFRecord)
    BASE/<version>/assets.extra/keras_saat.json               (what was exported, how)
    BASE/<version>/assets.extra/vocab.txt                     (the vocabulary, id order)
"""

import datetime
import errno
import json
import os
import shutil
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_saat.encoders.image_encoder import default_inference_chunk
from keras_saat.errors import KerasSaatError
from keras_saat.export.familiarity_outputs import (
    familiarity_metadata,
    familiarity_outputs,
    warn_uncalibrated,
)
from keras_saat.export.staging import staging_folder, sweep_staging
from keras_saat.images.decoding import RESIZE_MODES, decode_images, resize_image
from keras_saat.io_utils import raise_write_failure, whole_number
from keras_saat.serving.request_checks import MAX_BATCH
from keras_saat.serving.signatures import DEFAULT_SIGNATURE, METADATA_FILE, PIXELS_SIGNATURE
from keras_saat.text.vocabulary import END_ID
from keras_saat.workdir import VOCAB_FILE

WARMUP_FILE = "tf_serving_warmup_requests"
# Images a signature runs at once: a larger request runs a slice at a time, so its
# memory follows the slice, not the request.
SLICE_IMAGES = MAX_BATCH
# How far the folded backbone's features may stray from the unfolded ones, relative to
# their largest magnitude, before export refuses to fold (float32 rounding is ~1e-6).
FOLD_TOLERANCE = 1e-4
# The same for a bfloat16 or float16 serving graph (their rounding is ~4e-3 a layer).
FOLD_TOLERANCE_16 = 5e-2


def encoder_chunk(export):
    """Images per backbone call: the ExportConfig's, or this process's default."""
    if export.encoder_chunk is None:
        return default_inference_chunk()
    if int(export.encoder_chunk) < 0:
        raise KerasSaatError(
            f"encoder_chunk must be 0 (whole batch), a positive number of images, or null "
            f"(auto); got {export.encoder_chunk}"
        )
    return int(export.encoder_chunk)


def serving_encoder(model, export, log=print):
    """The model's encoder, or its batch-norm-folded copy checked on two random images:
    a relative difference over the tolerance raises, naming the setting to turn off."""
    if not export.fold_batch_norms:
        return model.encoder
    encoder, count = model.encoder.folded()
    if not count:
        return encoder
    size = model.image_size
    pixels = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    expected = model.encoder.infer(pixels, 0).numpy()
    got = encoder.infer(pixels, 0).numpy()
    error = float(np.max(np.abs(got - expected)) / max(float(np.max(np.abs(expected))), 1e-12))
    # In bfloat16 (8-bit mantissa) both backbones round at every layer, differently.
    tolerance = FOLD_TOLERANCE if model.encoder.compute_dtype == "float32" else FOLD_TOLERANCE_16
    if not error <= tolerance:
        raise KerasSaatError(
            f"folding the backbone's batch norms changed its features by {error:.2e} (relative), "
            f"over {tolerance:g}; export with export.fold_batch_norms: false"
        )
    log(
        f"folded {count} batch norms and zero paddings into the backbone's convolutions (max relative change {error:.1e})"
    )
    return encoder


def in_slices(function, inputs, pads, output_spec, size=SLICE_IMAGES):
    """`function` (a tuple of (B, ...) tensors -> dict of (B, ...) tensors) on `inputs`
    a slice of at most `size` rows at a time (tf.map_fn), the outputs joined back; a last
    partial slice is padded with `pads` (a scalar per input), its extra rows dropped."""
    count = tf.shape(inputs[0])[0]
    chunk = tf.maximum(tf.minimum(count, size), 1)
    slices = tf.maximum((count + chunk - 1) // chunk, 1)  # an empty request: one padded row

    def cut(tensor, pad):
        extra = tf.concat([[slices * chunk - count], tf.shape(tensor)[1:]], 0)
        padded = tf.concat([tensor, tf.fill(extra, tf.cast(pad, tensor.dtype))], 0)
        return tf.reshape(padded, tf.concat([[slices, chunk], tf.shape(tensor)[1:]], 0))

    pieces = tuple(cut(t, p) for t, p in zip(inputs, pads, strict=True))  # (slices, chunk, ...)
    out = tf.map_fn(function, pieces, fn_output_signature=output_spec, parallel_iterations=1)
    return {
        key: tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0))[:count]
        for key, value in out.items()
    }


def output_spec(steps, grid_shape):
    """The signatures' outputs (dict of tf.TensorSpec, batch first)."""
    return {
        "caption": tf.TensorSpec([None], tf.string),
        "tokens": tf.TensorSpec([None, steps], tf.string),
        "log_prob": tf.TensorSpec([None], tf.float32),
        "attention": tf.TensorSpec([None, steps, *grid_shape], tf.float32),
        "novelty": tf.TensorSpec([None], tf.float32),
        "familiar": tf.TensorSpec([None], tf.bool),
        "valid": tf.TensorSpec([None], tf.bool),
        "error": tf.TensorSpec([None], tf.string),
    }


def serving_functions(model, decode, export, encoder=None):
    """The two signature functions: encoded image bytes -> outputs, float pixels -> outputs.

    `export` has its `resize` resolved (`keras_saat.export.resolved_export`); `encoder`
    is the one the graph runs (`serving_encoder`), None = model.encoder.
    """
    encoder = encoder or model.encoder
    if export.resize not in RESIZE_MODES:
        raise KerasSaatError(
            f"resize mode {export.resize!r} is not one of {', '.join(RESIZE_MODES)}"
        )
    chunk = encoder_chunk(export)
    if int(decode.beam_size) < 1:
        raise KerasSaatError(f"beam_size must be at least 1; got {decode.beam_size}")
    max_length = int(decode.max_length)
    steps = max_length + 1
    size = model.image_size
    words = tf.constant(list(model.vocabulary.words))

    def outputs(pixels, valid, error):
        features = encoder.infer(pixels, chunk)  # (B, L, C)
        out = model.generate_step(
            features, max_length, int(decode.beam_size), float(decode.length_penalty)
        )
        tokens = out["tokens"]  # (B, T), T = steps, <end> included
        generated = tf.range(steps)[None, :] < out["lengths"][:, None]
        generated = tf.logical_and(generated, valid[:, None])  # (B, T)
        strings = tf.where(generated, tf.gather(words, tokens), "")
        is_word = tf.logical_and(generated, tf.not_equal(tokens, END_ID))
        kept = tf.ragged.boolean_mask(strings, is_word)
        caption = tf.strings.reduce_join(kept, axis=1, separator=" ")
        alpha = tf.cast(out["alpha"], tf.float32)  # float32 outputs in any precision
        attention = tf.where(generated[:, :, None], alpha, 0.0)  # (B, T, L)
        attention = tf.reshape(attention, [-1, steps, *model.grid_shape])
        return {
            "caption": caption,
            "tokens": strings,
            "log_prob": tf.where(valid, tf.cast(out["log_prob"], tf.float32), 0.0),
            "attention": attention,
            **familiarity_outputs(out["novelty"], valid),
            "valid": valid,
            "error": error,
        }

    spec = output_spec(steps, model.grid_shape)

    def from_bytes(image_bytes):
        def run(piece):
            (encoded,) = piece
            return outputs(*decode_images(encoded, size, export.resize, export.max_pixels))

        return in_slices(run, (tf.reshape(image_bytes, [-1]),), ("",), spec)

    def from_pixels(pixels):
        pixels = tf.convert_to_tensor(pixels, tf.float32)
        message = "pixels must be (batch, height, width, 3), height, width >= 1"
        sized = tf.debugging.assert_positive(tf.shape(pixels)[1:3], message=message)
        with tf.control_dependencies([sized]):
            finite = tf.reduce_all(tf.math.is_finite(pixels), axis=[1, 2, 3])
        in_range = tf.reduce_all(tf.logical_and(pixels >= 0.0, pixels <= 255.0), axis=[1, 2, 3])
        valid = tf.logical_and(finite, in_range)
        error = tf.where(
            finite,
            tf.where(in_range, "", "pixel values outside 0..255; send RGB values in [0, 255]"),
            "pixels contain NaN or infinity",
        )
        pixels = tf.where(valid[:, None, None, None], pixels, 0.0)

        def run(piece):
            pixels, valid, error = piece
            return outputs(resize_image(pixels, size, export.resize), valid, error)

        return in_slices(run, (pixels, valid, error), (0.0, False, ""), spec)

    return from_bytes, from_pixels


def next_version(base):
    """1 + the highest numeric version folder under `base` (1 when there is none)."""
    base = Path(base)
    folders = base.iterdir() if base.is_dir() else ()
    versions = [whole_number(p.name) for p in folders if p.is_dir()]
    return max((v for v in versions if v is not None), default=0) + 1


def export_saved_model(model, base, decode, export, version=None, metadata=None, log=print):
    """Writes `model` as BASE/<version>/, TF Serving's layout, renamed into place when
    whole; returns that folder. The arguments are an export format's (`export_formats`):
    `version` None is one more than the highest there, `metadata` joins keras_saat.json."""
    base = Path(base)
    if base.exists() and not base.is_dir():
        raise KerasSaatError(
            f"--out {base} is a file; give a folder (TF Serving's model base path)"
        )
    version = int(version) if version is not None else next_version(base)
    if version < 1:
        raise KerasSaatError(f"the version must be a positive integer; got {version}")
    final = base / str(version)
    if final.exists():
        raise KerasSaatError(
            f"{final} already exists; pass another --model-version or remove it (TF Serving may be serving it)"
        )
    encoder = serving_encoder(model, export, log)
    warn_uncalibrated(model, log)
    from_bytes, from_pixels = serving_functions(model, decode, export, encoder)
    archive = keras.export.ExportArchive()
    for layer in (encoder, model.squeeze, model.decoder, model.familiarity):  # what the graph runs
        if layer is not None:
            archive.track(layer)
    image_bytes = tf.TensorSpec([None], tf.string, name="image_bytes")
    pixels = tf.TensorSpec([None, None, None, 3], tf.float32, name="pixels")
    archive.add_endpoint(DEFAULT_SIGNATURE, from_bytes, input_signature=[image_bytes])
    archive.add_endpoint(PIXELS_SIGNATURE, from_pixels, input_signature=[pixels])
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise_write_failure(err, base)
        raise
    sweep_staging(base, log)
    staging = staging_folder(base, version)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        archive.write_out(str(staging), verbose=False)
        extra = staging / "assets.extra"
        extra.mkdir()
        (extra / VOCAB_FILE).write_text("\n".join(model.vocabulary.words) + "\n")
        info = export_metadata(model, decode, export, version, metadata)
        (extra / METADATA_FILE).write_text(json.dumps(info, indent=2) + "\n")
        if export.warmup:
            write_warmup_requests(extra / WARMUP_FILE, model.image_size, export.model_name)
        try:
            os.rename(staging, final)
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise KerasSaatError(
                f"{final} was written by another export meanwhile; run again for the next "
                "version, or pass another --model-version"
            ) from None
    except Exception as err:  # a full disk or a read-only base, in TF's words or Python's
        raise_write_failure(err, final, also=staging)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"exported {final} (signatures {DEFAULT_SIGNATURE}, {PIXELS_SIGNATURE})")
    return final


def export_metadata(model, decode, export, version, extra=None):
    """The contents of assets.extra/keras_saat.json."""
    from keras_saat import __version__

    info = {
        "package": "keras-saat",
        "package_version": __version__,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "version": version,
        "model_name": export.model_name,
        "signatures": {
            DEFAULT_SIGNATURE: {"inputs": {"image_bytes": "string [batch]"}},
            PIXELS_SIGNATURE: {"inputs": {"pixels": "float32 [batch, height, width, 3], 0..255"}},
            "outputs": {  # "float32 [batch, T, grid_h, grid_w]"
                key: f"{spec.dtype.name} [{', '.join(['batch', *map(str, spec.shape[1:])])}]"
                for key, spec in output_spec(int(decode.max_length) + 1, model.grid_shape).items()
            },
        },
        "familiarity": familiarity_metadata(model),
        "backbone": model.encoder.backbone_name,
        "image_size": model.image_size,
        "grid_shape": list(model.grid_shape),
        "attention": model.attention,
        "vocabulary_size": len(model.vocabulary),
        "beam_size": int(decode.beam_size),
        "length_penalty": float(decode.length_penalty),
        "max_length": int(decode.max_length),
        "resize": export.resize,
        "max_pixels": int(export.max_pixels),
        "encoder_chunk": encoder_chunk(export),
        "fold_batch_norms": bool(export.fold_batch_norms),
        "precision": model.precision,
        "model_config": {k: v for k, v in model.get_config().items() if k != "vocabulary"},
    }
    info.update(extra or {})
    return info


def warmup_images(size):
    """One JPEG and one PNG of a colour gradient at the model's input size."""
    y, x = np.mgrid[0:size, 0:size]
    image = np.stack([x * 255 // max(size - 1, 1), y * 255 // max(size - 1, 1), (x + y) % 256], -1)
    image = tf.constant(image.astype(np.uint8))
    return [tf.io.encode_jpeg(image).numpy(), tf.io.encode_png(image).numpy()]


def write_warmup_requests(path, size, model_name):
    """One PredictionLog per signature, which TF Serving replays at load."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    pixels = np.zeros((1, size, size, 3), np.float32)
    requests = [
        (DEFAULT_SIGNATURE, "image_bytes", tf.make_tensor_proto(warmup_images(size), tf.string)),
        (PIXELS_SIGNATURE, "pixels", tf.make_tensor_proto(pixels)),
    ]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for signature, key, tensor in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
            )
            request.inputs[key].CopyFrom(tensor)
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())
