"""Crafted inputs for the hostile-input tests and the bench's hostile part: files a user
loads (a backbone's `.pth` checkpoint, a preset folder) that declare more than they hold.

Each builder writes a small file (bytes, not gigabytes: a forged pickle, a sparse
file, a zip member whose header promises what its data never holds) and each case
hands it to the real loader. `tests/encoders/test_torch_checkpoint_hostile.py` and
`tests/models/test_preset_hostile.py` run the same cases under a memory cap.
"""

import pickle
import struct
import zipfile
import zlib

from keras_saat.errors import KerasSaatError
from keras_saat.models.preset import (
    ASSET_DIR,
    CONFIG_FILE,
    METADATA_FILE,
    VOCABULARY_FILE,
    WEIGHTS_FILE,
    preset_metadata,
)
from keras_saat.testing.hostile_cases import HostileCase
from keras_saat.workdir import MODEL_FILE

# ---- a pickle written opcode by opcode, so it can say what torch.save never would ----


def _value(value):
    """A picklable value's opcodes, without the protocol header and STOP."""
    return pickle.dumps(value, protocol=2)[2:-1]


def _global(module, name):
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def _tensor(key, numel, size, stride, offset=0, storage="FloatStorage"):
    """`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, {})`."""
    persistent = (
        pickle.MARK
        + _value("storage")
        + _global("torch", storage)
        + _value(key)
        + _value("cpu")
        + _value(numel)
        + pickle.TUPLE
        + pickle.BINPERSID
    )
    arguments = _value(offset) + _value(tuple(size)) + _value(tuple(stride)) + _value(False)
    return (
        _global("torch._utils", "_rebuild_tensor_v2")
        + pickle.MARK
        + persistent
        + arguments
        + pickle.EMPTY_DICT
        + pickle.TUPLE
        + pickle.REDUCE
    )


def state_dict_pickle(tensors, extra=b""):
    """A state_dict pickle: `tensors` is [(name, key, numel, size, stride), ...]; `extra`
    opcodes run first (a forged memo index, a counted string)."""
    body = b"".join(_value(name) + _tensor(*spec) + pickle.SETITEM for name, *spec in tensors)
    return pickle.PROTO + b"\x02" + extra + pickle.EMPTY_DICT + body + pickle.STOP


def write_zip_pth(path, pickled, storages):
    """torch's zip layout: archive/data.pkl and one member a storage ({key: bytes})."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        for key, data in storages.items():
            archive.writestr(f"archive/data/{key}", data)
    return path


def write_legacy_pth(path, pickled, storages):
    """torch's legacy layout: magic, protocol, system info, the state, the storage keys,
    then each storage as its element count and bytes ({key: (count, bytes)})."""
    with open(path, "wb") as out:
        for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
            pickle.dump(header, out, protocol=2)
        out.write(pickled)
        pickle.dump(list(storages), out, protocol=2)
        for count, data in storages.values():
            out.write(struct.pack("<q", count) + data)
    return path


def zip_bomb_pth(path, inflated=(4 << 30) - 1):
    """A zip-layout checkpoint whose one-float storage's member inflates to `inflated` bytes.

    The deflate stream is one compressed 1 MiB block of zeros repeated (a full flush
    resets the compressor, so each copy is the same bytes): 4 MB on disk for 4 GB out.
    The member's header is written by hand, since zipfile writes only what it compressed.
    """
    chunk = 1 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    copies, rest = divmod(inflated, chunk)
    tail = compressor.compress(bytes(rest)) + compressor.flush()
    stream = block * copies + tail
    pickled = state_dict_pickle([("weight", "0", 1, (1,), (1,))])
    write_zip_pth(path, pickled, {})
    with zipfile.ZipFile(path, "a") as archive:
        info = zipfile.ZipInfo("archive/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(info, b"\0")  # a placeholder, its header rewritten below
    data = bytearray(open(path, "rb").read())
    return _swap_member(path, data, b"archive/data/0", stream, inflated)


def _swap_member(path, data, name, stream, inflated):
    """Replaces the last member's compressed bytes with `stream`, its sizes with the forged ones."""
    local = data.rfind(b"PK\x03\x04")
    central = data.rfind(b"PK\x01\x02")
    name_length, extra_length = struct.unpack("<HH", data[local + 26 : local + 30])
    start = local + 30 + name_length + extra_length
    old_size = struct.unpack("<I", data[local + 18 : local + 22])[0]
    sizes = struct.pack("<III", zlib.crc32(b""), len(stream), inflated)
    data[local + 14 : local + 26] = sizes
    data[central + 16 : central + 28] = sizes
    end = data.rfind(b"PK\x05\x06")
    directory_offset = struct.unpack("<I", data[end + 16 : end + 20])[0]
    shift = len(stream) - old_size
    data[end + 16 : end + 20] = struct.pack("<I", directory_offset + shift)
    data[start : start + old_size] = stream
    path.write_bytes(bytes(data))
    return path


def _answer(load, path):
    """The one line a user sees: the error's message, or "" if it loaded."""
    try:
        load(path)
    except KerasSaatError as err:
        return str(err)
    return ""


def _read(path):
    from keras_saat.encoders.torch_checkpoint import read_state_dict

    return read_state_dict(path)


def _floats(count):
    return struct.pack(f"<{count}f", *range(count))


def stride_past_storage(scratch):
    """A 4-float storage read with a stride of 2^36 floats: as_strided reads 256 GB away."""
    pickled = state_dict_pickle([("weight", "0", 4, (2,), (1 << 36,))])
    return write_zip_pth(scratch / "stride_past.pth", pickled, {"0": _floats(4)})


def small_overreach(scratch):
    """A 4-float storage read as 64 floats: 240 bytes of the process's memory."""
    pickled = state_dict_pickle([("weight", "0", 4, (64,), (1,))])
    return write_zip_pth(scratch / "overreach.pth", pickled, {"0": _floats(4)})


def stride_zero(scratch):
    """One float viewed as a 30000x30000 tensor with strides (0, 0): 3.6 GB copied out."""
    pickled = state_dict_pickle([("weight", "0", 1, (30000, 30000), (0, 0))])
    return write_zip_pth(scratch / "stride_zero.pth", pickled, {"0": _floats(1)})


def zip_bomb(scratch):
    return zip_bomb_pth(scratch / "bomb.pth")


def legacy_huge_storage(scratch):
    """A legacy-layout storage whose count says 2^40 floats; the file holds 4."""
    pickled = state_dict_pickle([("weight", "0", 4, (4,), (1,))])
    return write_legacy_pth(scratch / "legacy.pth", pickled, {"0": (1 << 40, _floats(4))})


def pickle_memo_index(scratch):
    """A memo index of 2^28 in a 200-byte pickle: pickle grows its memo table to 4 GB."""
    extra = pickle.NONE + pickle.LONG_BINPUT + struct.pack("<I", 1 << 28) + pickle.POP
    pickled = state_dict_pickle([("weight", "0", 4, (4,), (1,))], extra)
    return write_zip_pth(scratch / "memo.pth", pickled, {"0": _floats(4)})


def pickle_counted_bytes(scratch):
    """A counted byte string declaring 2^40 bytes: pickle allocates it before reading."""
    extra = b"\x8e" + struct.pack("<Q", 1 << 40) + pickle.POP  # BINBYTES8
    pickled = state_dict_pickle([("weight", "0", 4, (4,), (1,))], extra)
    return write_legacy_pth(scratch / "bytes.pth", pickled, {"0": (4, _floats(4))})


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


def _case(name, build, bound, load=_read):
    return HostileCase(
        name, "untrusted files", bound, lambda scratch: _answer(load, build(scratch))
    )


PTH_CASES = [
    _case("pth_stride_past_storage", stride_past_storage, "view checked against its storage"),
    _case("pth_small_overreach", small_overreach, "view checked against its storage"),
    _case("pth_stride_zero_30000sq", stride_zero, "elements <= the storage's"),
    _case("pth_zip_member_4gb", zip_bomb, "member size == numel * itemsize"),
    _case("pth_legacy_2e40_floats", legacy_huge_storage, "count <= bytes left in the file"),
    _case("pth_pickle_memo_2e28", pickle_memo_index, "memo index <= items written"),
    _case("pth_pickle_bytes_2e40", pickle_counted_bytes, "counted string <= bytes left"),
]

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

CASES = (
    PTH_CASES + PRESET_CASES + KERAS_FILE_CASES
)  # HostileCase rows (keras_saat.testing.hostile_cases)
