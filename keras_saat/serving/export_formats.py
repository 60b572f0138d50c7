"""Export format registry: `export.format` name -> the function that writes it.

An export function is `write(model, out, decode, export, version, metadata, log) -> Path`:
the Captioner, the output folder, the DecodeConfig and ExportConfig (its `resize`
resolved), the version (None = the next free one), extra metadata (a dict) and a log
function. A new format is one module with such a function and one
`register_export_format("name", write)`; `keras-saat export --format name` and
`export.format: name` then select it. `keras_saat.serving.export` is the switch.
"""

from keras_saat.registries import Registry

EXPORT_FORMATS = Registry("export format")
register_export_format = EXPORT_FORMATS.register
available_formats = EXPORT_FORMATS.names
get_export_format = EXPORT_FORMATS.get


def _saved_model(model, out, decode, export, version=None, metadata=None, log=print):
    # Imported when used: the registry itself needs neither TensorFlow nor Keras.
    from keras_saat.serving.saved_model import export_saved_model

    return export_saved_model(model, out, decode, export, version, metadata, log)


def _preset(model, out, decode, export, version=None, metadata=None, log=print):
    """A preset folder (`Captioner.save_to_preset`): the model with these decode settings."""
    from keras_saat.models.preset import save_preset

    if version is not None:
        log("a preset folder has no versions: --version is ignored")
    settings = {
        "max_length": decode.max_length,
        "beam_size": decode.beam_size,
        "length_penalty": decode.length_penalty,
        "resize": export.resize,
    }
    if any(getattr(model, key) != value for key, value in settings.items()):
        model = model.with_settings(**settings)
    path = save_preset(model, out, metadata)
    log(f"wrote the preset {path} (load it with Captioner.from_preset or --preset {path})")
    return path


def _litert(model, out, decode, export, version=None, metadata=None, log=print):
    from keras_saat.serving.litert import export_litert

    return export_litert(model, out, decode, export, version, metadata, log)


register_export_format("savedmodel", _saved_model)
register_export_format("preset", _preset)
register_export_format("litert", _litert)
