"""Export format registry: `export.format` name -> the function that writes it.

A format is one module with a function `write(model, out, decode, export, version,
metadata, log) -> Path` (the Captioner, the output folder, the DecodeConfig and the
ExportConfig with `resize` resolved, the version or None for the next free one, extra
metadata (a dict) and a log function) and one `register_export_format("name", write)`;
`keras-saat export --format name` and `export.format: name` then select it.

The built-in formats are registered by module path, so the config checks a format's name
without importing TensorFlow or the export code: the registry sits below the config for
that reason, not in `keras_saat.export` (the switch, with a module per built-in format).
"""

from keras_saat.registries import Registry

EXPORT_FORMATS = Registry("export format")
register_export_format = EXPORT_FORMATS.register
available_formats = EXPORT_FORMATS.names
get_export_format = EXPORT_FORMATS.get

register_export_format("savedmodel", "keras_saat.export.saved_model:export_saved_model")
register_export_format("preset", "keras_saat.export.preset_format:export_preset")
register_export_format("litert", "keras_saat.export.litert:export_litert")
