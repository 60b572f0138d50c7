"""Crafted backbone checkpoints for the hostile-input tests and the bench's hostile
part: `.pth` files that declare more than they hold.

Each builder writes a small file (bytes, not gigabytes: a forged pickle, a zip member
whose header promises what its data never holds) and each case hands it to the real
reader. `tests/encoders/test_torch_checkpoint_hostile.py` runs the same cases under a
memory cap.
"""

import pickle
import struct
import zipfile
import zlib

from tests.support.hostile_cases import HostileCase, error_line

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


def _case(name, build, bound, load=_read):
    def run(scratch):
        path = build(scratch)  # outside error_line: a builder's failure is not an answer
        return error_line(lambda: load(path))

    return HostileCase(name, "untrusted files", bound, run)


PTH_CASES = [
    _case("pth_stride_past_storage", stride_past_storage, "view checked against its storage"),
    _case("pth_small_overreach", small_overreach, "view checked against its storage"),
    _case("pth_stride_zero_30000sq", stride_zero, "elements <= the storage's"),
    _case("pth_zip_member_4gb", zip_bomb, "member size == numel * itemsize"),
    _case("pth_legacy_2e40_floats", legacy_huge_storage, "count <= bytes left in the file"),
    _case("pth_pickle_memo_2e28", pickle_memo_index, "memo index <= items written"),
    _case("pth_pickle_bytes_2e40", pickle_counted_bytes, "counted string <= bytes left"),
]

CASES = PTH_CASES  # HostileCase rows (tests.support.hostile_cases)
