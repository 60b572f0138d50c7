"""The "preset" export format: a preset folder (`Captioner.save_to_preset`) that holds
the export's decoding settings."""

from keras_saat.models.preset import save_preset


def export_preset(model, out, decode, export, version=None, metadata=None, log=print):
    """A preset folder (`Captioner.save_to_preset`): the model with these decode settings."""
    if version is not None:
        log("a preset folder has no versions: --model-version is ignored")
    settings = {k: getattr(decode, k) for k in ("max_length", "beam_size", "length_penalty")}
    settings["resize"] = export.resize
    if any(getattr(model, key) != value for key, value in settings.items()):
        model = model.with_settings(**settings)
    path = save_preset(model, out, metadata)
    log(f"wrote the preset {path} (load it with Captioner.from_preset or --preset {path})")
    return path
