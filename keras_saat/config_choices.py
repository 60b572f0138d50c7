"""The allowed values of each config key with a fixed set, and a value's type check.

Nothing here imports TensorFlow, so a config is checked before TensorFlow loads.
"""

import importlib
import typing

from keras_saat.config_ranges import RANGES, check_range, shown
from keras_saat.errors import KerasSaatError, did_you_mean
from keras_saat.runtime.precision import PRECISIONS


def _deferred(entry):
    """The function "module:function" names, its module imported when it is first called."""
    module, function = entry.split(":")
    return lambda *args: getattr(importlib.import_module(module), function)(*args)


# A tuple, or a function returning a registry's names (asked only when the key is set).
# Some repeat constants whose owners import TensorFlow; tests/test_config.py checks them.
CHOICES = {
    ("model", "attention"): _deferred("keras_saat.layers.attention_registry:available_attentions"),
    ("model", "reinforce_baseline"): ("moving_average", "expected_context"),
    ("data", "dataset"): _deferred("keras_saat.data.readers.reader_registry:available_readers"),
    ("export", "format"): _deferred("keras_saat.export_formats:available_formats"),
    ("export", "precision"): ("float32", "bfloat16", "auto"),
    ("data", "resize"): ("crop", "pad", "stretch"),
    ("export", "resize"): ("", "crop", "pad", "stretch"),
    ("export", "quantize"): ("none", "float16", "int8"),
    ("data", "cache_dtype"): ("float16", "float32", "int8"),
    ("data", "cache_compression"): ("none", "zlib"),
    ("data", "batching"): ("auto", "per_caption", "per_image"),
    ("data", "partial_batches"): ("pad", "drop"),
    ("data", "resident_features"): (True, False, "auto"),
    ("train", "optimizer"): ("adam", "rmsprop"),
    ("train", "lr_schedule"): ("constant", "cosine", "exponential"),
    ("train", "distribute"): ("default", "mirrored", "multi_worker"),
    ("train", "jit_compile"): (True, False, "auto"),
    ("train", "fused_scores"): (True, False, "auto"),
    ("train", "mixed_precision"): PRECISIONS,
}


# Keys checked by asking a registry for the entry (its error names the nearest one, and
# for backbones the qubvel extra).
VALIDATORS = {("model", "backbone"): _deferred("keras_saat.encoders.registry:get_backbone_spec")}


def coerce(where, value, annotation):
    """Checks `value` against a field's type annotation; returns the typed value."""
    allowed = typing.get_args(annotation) or (annotation,)
    names = " or ".join(k.__name__ for k in allowed)
    if value is None:
        if type(None) in allowed:
            return None
        raise KerasSaatError(f"config {where}: null is not allowed; expected {names}")
    for kind in allowed:
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise KerasSaatError(f"config {where}: {shown(value)} is not a valid {names}")


def check_value(name, key, given, annotation):
    """`given`, the value of `name.key`, typed by the field's `annotation` and checked
    against the key's range, choices and registry; returns the typed value."""
    value = coerce(f"{name}.{key}", given, annotation)
    if (name, key) in RANGES:
        check_range(f"{name}.{key}", value, RANGES[name, key])
    choices = CHOICES.get((name, key))
    if callable(choices):
        choices = choices()
    if choices and not any(value == c and type(value) is type(c) for c in choices):
        texts = [str(c).lower() if isinstance(c, bool) else str(c) for c in choices]  # as YAML
        raise KerasSaatError(
            f"config {name}.{key}: {shown(given)} is not one of {', '.join(texts)}"
            f"{did_you_mean(str(value)[:100], texts)}"
        )
    if (name, key) in VALIDATORS:
        VALIDATORS[name, key](value)
    return value
