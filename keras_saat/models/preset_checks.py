"""The sizes a preset folder may declare, checked before Keras builds or loads anything,
so a downloaded file cannot make it allocate unbounded memory. The caps sit far above
the paper's model."""

import json
import math
import os
import tempfile
import zipfile

from keras_saat.errors import KerasSaatError

MAX_CONFIG_BYTES = 1 << 20
MAX_VOCABULARY_BYTES = 8 << 20
MAX_VOCABULARY_WORDS = 100_000
# The weights file, and the total a compressed (chunked and filtered) dataset may inflate to.
MAX_WEIGHTS_BYTES = 2 << 30
MAX_WEIGHTS_DATASETS = 100_000
# Captioner arguments -> the largest value a preset may give them.
MODEL_LIMITS = {
    "feature_dim": 8192,
    "embedding_dim": 8192,
    "lstm_units": 8192,
    "attention_units": 8192,
    "image_size": 2048,
    "max_length": 1024,
    "beam_size": 64,
    "max_pixels": 1_000_000_000,
    "trainable_backbone_layers": 10_000,
}


def check_file_size(path, limit, what):
    """Refuses `path` when it is larger than `limit` bytes, before it is read."""
    size = os.path.getsize(path)
    if size > limit:
        raise KerasSaatError(
            f"{path} is {size} bytes, over the {limit} a preset's {what} may be; "
            "the file is damaged or not a keras-saat preset"
        )


def check_model_sizes(settings, vocabulary_size, path):
    """Refuses Captioner arguments (config.json's "config") whose sizes are not integers
    within `MODEL_LIMITS`, or a vocabulary that is too large; errors name `path`."""
    if not isinstance(settings, dict):
        raise KerasSaatError(f"{path}: the model's config is not a JSON object")
    for key, limit in MODEL_LIMITS.items():
        value = settings.get(key)
        if value is not None and (type(value) is not int or not 0 <= value <= limit):
            raise KerasSaatError(
                f"{path}: {key} is {value!r:.40}; a saved Captioner's must be an integer "
                f"from 0 to {limit}"
            )
    if vocabulary_size > MAX_VOCABULARY_WORDS:
        raise KerasSaatError(
            f"{path}: the vocabulary has {vocabulary_size} words, over {MAX_VOCABULARY_WORDS}"
        )


def implied_weights(settings, vocabulary_size):
    """A lower bound on the decoder's weights (elements) the config implies: E and L_o,
    the LSTM's kernels and L_h (Sec. 3.1.2)."""
    embedding = settings.get("embedding_dim") or 0
    units = settings.get("lstm_units") or 0
    annotation = settings.get("feature_dim") or 0
    attention = settings.get("attention_units") or 0
    return (
        2 * vocabulary_size * embedding
        + 4 * units * (embedding + units + annotation)
        + units * embedding
        + annotation * attention
    )


def check_weights_file(path, settings, vocabulary_size, label=None):
    """Reads the weights file's headers and refuses it when its datasets declare more than
    the file holds (compressed ones: `MAX_WEIGHTS_BYTES`) or fewer weights than the
    checked Captioner arguments `settings` imply. Errors call the file `label` or `path`."""
    import h5py

    label = label or path
    check_file_size(path, MAX_WEIGHTS_BYTES, "weights file")
    on_disk = os.path.getsize(path)
    datasets = []

    def visit(name, item):
        if isinstance(item, h5py.Dataset):
            datasets.append((name, item))
            if len(datasets) > MAX_WEIGHTS_DATASETS:
                raise KerasSaatError(f"{label} holds over {MAX_WEIGHTS_DATASETS} datasets")

    try:
        with h5py.File(path, "r") as weights:
            weights.visititems(visit)
            totals, elements = {"plain": 0, "compressed": 0}, 0
            for name, dataset in datasets:
                if dataset.dtype.kind not in "biuf":
                    raise KerasSaatError(
                        f"{label}: dataset {name} holds {dataset.dtype}, not numbers"
                    )
                count = math.prod(dataset.shape)
                declared = count * dataset.dtype.itemsize
                elements += count
                filtered = dataset.id.get_create_plist().get_nfilters()  # compression is a filter
                kind, limit = ("compressed", MAX_WEIGHTS_BYTES) if filtered else ("plain", on_disk)
                totals[kind] += declared
                if totals[kind] > limit:
                    raise KerasSaatError(
                        f"{label}: dataset {name} declares {dataset.shape} ({declared} bytes), "
                        f"taking the datasets past {limit} bytes "
                        + ("(the file's size)" if limit == on_disk else "(compressed, in all)")
                        + "; the file is damaged or crafted"
                    )
    except KerasSaatError:
        raise
    except Exception as err:  # h5py raises OSError, KeyError and others for a damaged file
        raise KerasSaatError(f"{label}: {type(err).__name__}: {err}") from None
    implied = implied_weights(settings, vocabulary_size)
    if implied > elements:
        raise KerasSaatError(
            f"{label} holds {elements} weights; the preset's config.json implies at least "
            f"{implied} (lstm_units {settings.get('lstm_units')}, embedding_dim "
            f"{settings.get('embedding_dim')}, {vocabulary_size} words): they do not belong together"
        )


# A `.keras` archive's members (Keras's names), and its config.json's limit: it carries
# the vocabulary inline (JSON-escaped words).
ARCHIVE_CONFIG, ARCHIVE_WEIGHTS = "config.json", "model.weights.h5"
MAX_ARCHIVE_CONFIG_BYTES = MAX_CONFIG_BYTES + 2 * MAX_VOCABULARY_BYTES


def check_keras_archive(path):
    """The preset checks for a `.keras` file (`load_captioner`), before Keras unpacks it."""
    if not zipfile.is_zipfile(path):
        return  # a legacy .h5 model or no model: Keras reports it
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise KerasSaatError(f"{path} is not a .keras archive: {err}") from None
    with archive:
        members = {info.filename: info for info in archive.infolist()}
        config_info, weights_info = members.get(ARCHIVE_CONFIG), members.get(ARCHIVE_WEIGHTS)
        if config_info is None or weights_info is None:
            return  # not the layout this checks; Keras reports what is missing
        limits = ((config_info, MAX_ARCHIVE_CONFIG_BYTES), (weights_info, MAX_WEIGHTS_BYTES))
        for info, limit in limits:
            if info.file_size > limit:
                raise KerasSaatError(
                    f"{path}: {info.filename} declares {info.file_size} bytes, over the {limit} "
                    "a saved Captioner's may be; the file is damaged or crafted"
                )
        with archive.open(config_info) as member:
            text = member.read(MAX_ARCHIVE_CONFIG_BYTES + 1)
        try:
            settings = json.loads(text)["config"]
            vocabulary = settings["vocabulary"]
        except (ValueError, KeyError, TypeError) as err:
            raise KerasSaatError(
                f"{path}: {ARCHIVE_CONFIG} holds no Captioner config: {err}"
            ) from None
        if not isinstance(vocabulary, list):
            raise KerasSaatError(f"{path}: {ARCHIVE_CONFIG} holds no vocabulary list")
        check_model_sizes(settings, len(vocabulary), f"{path}: {ARCHIVE_CONFIG}")
        with tempfile.TemporaryDirectory() as scratch:
            weights = archive.extract(weights_info, scratch)
            check_weights_file(weights, settings, len(vocabulary), f"{path}: {ARCHIVE_WEIGHTS}")
