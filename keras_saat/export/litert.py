"""LiteRT (TensorFlow Lite) export: the whole captioner in one .tflite file of builtin
ops only, with OUT/vocab.txt and OUT/<name>.json. One signature, `serving_default`:

    input   pixels     float32 [1, S, S, 3], 0..255, the image already resized to the
                       model's input by its resize rule (`resize` in the .json)
    outputs tokens     int32 [1, T]  token ids (vocab.txt line numbers), <end> included,
                                     <pad> (0) after it; T = max_length + 1
            log_prob   float32 [1]   the caption's log-probability
            attention  float32 [1, T, grid_h, grid_w]  the map each token was generated
                                     with; zeros after <end>
            novelty    float32 [1]   how unlike the training pictures the image is: above
                                     1 is unlike them (NaN: the model was never calibrated)
            familiar   bool [1]      novelty <= 1 (true when never calibrated)
"""

import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.export.familiarity_outputs import (
    familiarity_metadata,
    familiarity_outputs,
    warn_uncalibrated,
)
from keras_saat.io_utils import write_bytes_atomic
from keras_saat.serving.signatures import DEFAULT_SIGNATURE
from keras_saat.text.vocabulary import END_ID, PAD_ID, START_ID, UNK_ID
from keras_saat.workdir import VOCAB_FILE

QUANTIZE_MODES = ("none", "float16", "int8")


def litert_function(model, decode, encoder=None):
    """The LiteRT graph as a tf.function: pixels [1, S, S, 3] -> the outputs above."""
    encoder = encoder or model.encoder
    size, (grid_h, grid_w) = model.image_size, model.grid_shape
    steps = int(decode.max_length) + 1

    @tf.function(input_signature=[tf.TensorSpec([1, size, size, 3], tf.float32, name="pixels")])
    def serve(pixels):
        features = tf.cast(encoder(pixels), model.compute_dtype)  # (1, L, C)
        out = model.generate_step(
            features, int(decode.max_length), int(decode.beam_size), float(decode.length_penalty)
        )
        return {
            "tokens": tf.reshape(tf.cast(out["tokens"], tf.int32), [1, steps]),
            "log_prob": tf.reshape(tf.cast(out["log_prob"], tf.float32), [1]),
            "attention": tf.reshape(tf.cast(out["alpha"], tf.float32), [1, steps, grid_h, grid_w]),
            **{k: tf.reshape(v, [1]) for k, v in familiarity_outputs(out["novelty"]).items()},
        }

    return serve


def convert(function, quantize="none"):
    """The .tflite bytes of a tf.function with one input signature, builtin ops only."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    if quantize not in QUANTIZE_MODES:
        raise KerasSaatError(
            f"quantize must be one of {', '.join(QUANTIZE_MODES)}; got {quantize!r}"
        )
    concrete = function.get_concrete_function()
    # LiteRT does not read resource variables captured in a while loop body.
    frozen = convert_variables_to_constants_v2(concrete)  # (flat outputs, sorted keys)
    names = sorted(concrete.structured_outputs)
    spec = concrete.structured_input_signature[0][0]

    @tf.function(input_signature=[spec])
    def named(pixels):
        return dict(zip(names, frozen(pixels), strict=True))

    staging = Path(tempfile.mkdtemp(prefix="keras-saat-litert-"))
    try:
        # The frozen graph keeps the stacked matmul's gradient ops unsaved: inference only.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        signatures = {DEFAULT_SIGNATURE: named.get_concrete_function()}
        tf.saved_model.save(tf.Module(), str(staging), signatures=signatures, options=options)
        converter = tf.lite.TFLiteConverter.from_saved_model(
            str(staging), signature_keys=[DEFAULT_SIGNATURE]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize != "none":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic-range int8 weights
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        try:
            return converter.convert()
        except Exception as err:  # the converter raises its own ConverterError
            ops = sorted(set(re.findall(r"\btf\.([A-Za-z0-9_]+)", str(err))))
            if ops:
                raise KerasSaatError(
                    "the LiteRT export needs TensorFlow ops that LiteRT's builtin set lacks: "
                    f"{', '.join(ops)}; the model must use ops LiteRT has (no Select TF ops)"
                ) from None
            raise KerasSaatError(f"LiteRT conversion failed: {str(err).splitlines()[0]}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def export_litert(model, out, decode, export, version=None, metadata=None, log=print):
    """Writes OUT/<name>.tflite, OUT/vocab.txt and OUT/<name>.json; returns the .tflite path.

    The arguments are an export format's (`export_formats`); `export.model_name` names the
    files and `export.quantize` picks the weights' precision; `version` is ignored.
    """
    from keras_saat.export.saved_model import serving_encoder

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise KerasSaatError(f"--out {out} is a file; give a folder for the .tflite file")
    if version is not None:
        log("a .tflite file has no versions: --model-version is ignored")
    encoder = serving_encoder(model, export, log)
    warn_uncalibrated(model, log)
    data = convert(litert_function(model, decode, encoder), export.quantize)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{export.model_name}.tflite"
    write_bytes_atomic(path, data)
    (out / VOCAB_FILE).write_text("\n".join(model.vocabulary.words) + "\n", encoding="utf-8")
    info = {
        "format": "litert",
        "signature": DEFAULT_SIGNATURE,
        "input": {"pixels": [1, model.image_size, model.image_size, 3], "dtype": "float32"},
        "image_size": model.image_size,
        "resize": export.resize,
        "grid": list(model.grid_shape),
        "max_length": int(decode.max_length),
        "beam_size": int(decode.beam_size),
        "length_penalty": float(decode.length_penalty),
        "quantize": export.quantize,
        "vocabulary": VOCAB_FILE,
        "special_tokens": {"pad": PAD_ID, "unk": UNK_ID, "start": START_ID, "end": END_ID},
        "familiarity": familiarity_metadata(model),
        **(metadata or {}),
    }
    (out / f"{export.model_name}.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    log(
        f"exported {path} ({len(data) / 1e6:.1f} MB, quantize {export.quantize}) and {out / VOCAB_FILE}"
    )
    return path


def run_litert(path, pixels, threads=None):
    """Runs a .tflite captioner on (N, S, S, 3) pixels, one image a call; dict of stacked outputs."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=threads)
    runner = interpreter.get_signature_runner(DEFAULT_SIGNATURE)
    results = [runner(pixels=np.asarray(p, np.float32)[None]) for p in pixels]
    return {key: np.concatenate([r[key] for r in results]) for key in results[0]}
