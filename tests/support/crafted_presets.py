"""Crafted presets and `.keras` files for the hostile-input tests and the bench's
hostile part: a real small preset with one of its files swapped for one that declares
more than it holds (a sparse file, a forged HDF5 dataset).

`tests/models/test_preset_hostile.py` runs the same cases under a memory cap.
"""

import zipfile

from keras_saat.models.preset import (
    ASSET_DIR,
    CONFIG_FILE,
    METADATA_FILE,
    VOCABULARY_FILE,
    WEIGHTS_FILE,
    preset_metadata,
)
from keras_saat.workdir import MODEL_FILE
from tests.support.hostile_cases import HostileCase, error_line

# ---- preset folders: a real small preset, one of its files swapped for a crafted one ----

PRESET_WORDS = "a red blue circle square at the top left on right".split()


def small_preset(folder, **settings):
    """A real preset of a small shapes Captioner (`settings` override its sizes in
    config.json afterwards, so the weights stay the small model's)."""
    import json

    from keras_saat.models.captioner import Captioner
    from keras_saat.text.vocabulary import Vocabulary

    words = Vocabulary.build([PRESET_WORDS]).words
    sizes = dict(feature_dim=16, embedding_dim=8, lstm_units=12, attention_units=8, seed=1)
    Captioner(words, **sizes).save_to_preset(folder)
    if settings:
        config_path = folder / CONFIG_FILE
        config = json.loads(config_path.read_text())
        config["config"].update(settings)
        config_path.write_text(json.dumps(config))
    return folder


def _sparse(path, size):
    """A file of `size` zero bytes that takes no room on disk."""
    with open(path, "r+b" if path.exists() else "wb") as out:
        out.truncate(size)


def _vocabulary(folder, lines):
    (folder / ASSET_DIR / VOCABULARY_FILE).write_text("\n".join(lines) + "\n")


def preset_lstm_units(scratch):
    """config.json says lstm_units 30000: a 14 GB LSTM kernel before the weights are read."""
    return small_preset(scratch / "p", lstm_units=30000)


def preset_units_under_cap(scratch):
    """lstm_units and embedding_dim of 8000 (under the caps) beside a 2 MB weights file."""
    return small_preset(scratch / "p", lstm_units=8000, embedding_dim=8000)


def preset_config_sparse(scratch):
    """A 1 GB config.json (sparse: zeros)."""
    folder = small_preset(scratch / "p")
    _sparse(folder / CONFIG_FILE, 1 << 30)
    return folder


def preset_vocabulary_sparse(scratch):
    """A 1 GB vocabulary.txt (sparse: zeros, one line)."""
    folder = small_preset(scratch / "p")
    _sparse(folder / ASSET_DIR / VOCABULARY_FILE, 1 << 30)
    return folder


def preset_vocabulary_lines(scratch):
    """200k words (1.4 MB) with embedding_dim 4096: 6.5 GB of embedding and output layer."""
    folder = small_preset(scratch / "p", embedding_dim=4096)
    _vocabulary(folder, ["<pad>", "<unk>", "<start>", "<end>", *map(str, range(200_000))])
    return folder


def preset_vocabulary_duplicates(scratch):
    """A million copies of one word (2 MB): a duplicate report that counts each copy in
    the list is 10^12 comparisons."""
    folder = small_preset(scratch / "p")
    _vocabulary(folder, ["<pad>", "<unk>", "<start>", "<end>", *["a"] * 1_000_000])
    return folder


def preset_metadata_sparse(scratch):
    """A 1 GB metadata.json (sparse: zeros), read for the training config it may carry."""
    folder = small_preset(scratch / "p")
    _sparse(folder / METADATA_FILE, 1 << 30)
    return folder


def _swap_dataset(folder, **options):
    """The weights file's `vars/0` (the REINFORCE baseline, a scalar) redeclared as 10^9
    floats (3.7 GiB, under Keras's 4 GiB floor), never written: the file stays small."""
    import h5py

    with h5py.File(folder / WEIGHTS_FILE, "r+") as weights:
        del weights["vars/0"]
        weights.create_dataset("vars/0", shape=(1_000_000_000,), dtype="f4", **options)
    return folder


def preset_weights_dataset(scratch):
    return _swap_dataset(small_preset(scratch / "p"))


def preset_weights_compressed(scratch):
    return _swap_dataset(small_preset(scratch / "p"), chunks=(1 << 20,), compression="gzip")


def _keras_file(scratch, config=None, swap=False):
    """The small preset's model as a `.keras` file, its config.json updated with `config`
    or its weights' `vars/0` swapped as `_swap_dataset` does."""
    import json

    folder = small_preset(scratch / "p")
    if swap:
        _swap_dataset(folder)
    path = scratch / MODEL_FILE
    source = crafted_preset_model(folder)
    source.save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if config:
        loaded = json.loads(members[CONFIG_FILE])
        loaded["config"].update(config)
        members[CONFIG_FILE] = json.dumps(loaded).encode()
    if swap:
        members[WEIGHTS_FILE] = (folder / WEIGHTS_FILE).read_bytes()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def crafted_preset_model(folder):
    """The preset's model built from its config.json alone (its weights left as built)."""
    import json

    import keras

    from keras_saat.text.vocabulary import Vocabulary

    config = json.loads((folder / CONFIG_FILE).read_text())
    config["config"]["vocabulary"] = Vocabulary.load(folder / ASSET_DIR / VOCABULARY_FILE).words
    return keras.saving.deserialize_keras_object(config)


def keras_lstm_units(scratch):
    """A .keras file whose config.json says lstm_units 30000."""
    return _keras_file(scratch, config={"lstm_units": 30000})


def keras_weights_dataset(scratch):
    """A .keras file whose weights declare a 3.7 GiB dataset they never hold."""
    return _keras_file(scratch, swap=True)


def _load_captioner(path):
    from keras_saat.models.factories import load_captioner

    return load_captioner(path)


def _load_preset(folder):
    from keras_saat.models.captioner import Captioner

    return Captioner.from_preset(folder)


def _case(name, build, bound, load):
    def run(scratch):
        path = build(scratch)  # outside error_line: a builder's failure is not an answer
        return error_line(lambda: load(path))

    return HostileCase(name, "untrusted files", bound, run)


PRESET_CASES = [
    _case(name, build, bound, _load_preset)
    for name, build, bound in [
        ("preset_lstm_units_30000", preset_lstm_units, "model sizes <= 8192"),
        ("preset_units_8000_tiny_h5", preset_units_under_cap, "config vs the weights' size"),
        ("preset_config_json_1gb", preset_config_sparse, "config.json <= 1 MiB"),
        ("preset_vocab_1gb", preset_vocabulary_sparse, "vocabulary.txt <= 8 MiB"),
        ("preset_vocab_200k_words", preset_vocabulary_lines, "vocabulary <= 100k words"),
        (
            "preset_vocab_1m_duplicates",
            preset_vocabulary_duplicates,
            "vocabulary <= 100k words",
        ),
        ("preset_h5_3_7gib_dataset", preset_weights_dataset, "datasets <= the file's size"),
        ("preset_h5_3_7gib_gzip", preset_weights_compressed, "compressed <= 2 GiB in all"),
    ]
]

PRESET_CASES.append(
    _case("preset_metadata_1gb", preset_metadata_sparse, "metadata.json <= 1 MiB", preset_metadata)
)

KERAS_FILE_CASES = [
    _case("keras_file_units_30000", keras_lstm_units, "model sizes <= 8192", _load_captioner),
    _case(
        "keras_file_h5_3_7gib",
        keras_weights_dataset,
        "datasets <= the file's size",
        _load_captioner,
    ),
]

CASES = PRESET_CASES + KERAS_FILE_CASES  # HostileCase rows (tests.support.hostile_cases)
