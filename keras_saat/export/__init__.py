"""Exporting a Captioner: one module per format (`saved_model`, `litert`,
`preset_format`), and this switch over the registered formats, configured by a
`DecodeConfig` and an `ExportConfig`."""

import dataclasses
from pathlib import Path

from keras_saat.config import DecodeConfig, ExportConfig
from keras_saat.export_formats import get_export_format
from keras_saat.runtime.precision import dtype_policy, resolve_precision


def resolved_export(model, export=None):
    """The ExportConfig with `resize` filled in: "" means the model's own rule (what
    training saw, `data.resize`); "auto" precision becomes what this machine computes."""
    export = export or ExportConfig()
    precision = resolve_precision("none" if export.precision == "float32" else export.precision)
    return dataclasses.replace(export, resize=export.resize or model.resize, precision=precision)


def export_model(model, out, decode=None, export=None, version=None, metadata=None, log=print):
    """Writes `model` in `export.format` (SavedModel by default) under `out`.

    Args:
        model: Captioner.
        out: path. The output folder (for a SavedModel, TF Serving's model base path).
        decode: DecodeConfig or None. Beam size, length penalty and maximum length; None =
            the model's own (its training config's decode section). Defaults to None.
        export: ExportConfig or None. The format and its settings; an empty `resize` means
            the model's own rule. Defaults to None (ExportConfig()).
        version: int or None. None = the next free version. Defaults to None.
        metadata: dict or None. Extra entries for the exported metadata. Defaults to None.
        log: callable. Defaults to print.

    Returns:
        Path of what was written (a SavedModel's version folder).
    """
    decode = decode or DecodeConfig(
        max_length=model.max_length, beam_size=model.beam_size, length_penalty=model.length_penalty
    )
    export = resolved_export(model, export)
    write = get_export_format(export.format)
    precision = export.precision
    if precision != model.precision:
        model = model.with_precision(precision)
        log(f"serving graph in {precision} (float32 weights, float32 outputs)")
    # Layers the export builds (the folded backbone) compute in the same precision.
    with dtype_policy(precision):
        return write(model, Path(out), decode, export, version, metadata, log)
