"""Reads a PyTorch `state_dict` file as NumPy arrays, without torch and without pickle's trust.

A `.pth` file is a pickle, which runs whatever functions it names; here it is unpickled
with an allow-list (an ordered dict, the tensor-rebuild functions and storage types).
Both torch layouts are read (legacy and zip). Every size the file declares is checked
against what is really there before anything is allocated, so a crafted file can
neither read past a buffer nor allocate more than `MAX_CHECKPOINT_BYTES`.
"""

import collections
import io
import math
import os
import pickle
import pickletools
import struct
import zipfile

import numpy as np

from keras_saat.errors import KerasSaatError

# torch storage classes -> NumPy dtypes (the names the pickle holds).
STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

# The file, its storages and the tensors copied out of them are each bounded by this.
MAX_CHECKPOINT_BYTES = 1 << 30
# data.pkl in the zip layout: names and shapes only.
MAX_PICKLE_BYTES = 64 << 20
MAX_TENSOR_DIMS = 8
_CHUNK = 1 << 20


class _Storage:
    def __init__(self, dtype, key, numel):
        self.dtype, self.key, self.numel = dtype, key, numel
        self.array = None


_Tensor = collections.namedtuple("_Tensor", ["storage", "offset", "size", "stride"])


def _rebuild_tensor(storage, storage_offset, size, stride, *unused):
    return _Tensor(storage, storage_offset, size, stride)


class _StorageType:
    def __init__(self, name):
        self.dtype = STORAGE_DTYPES[name]


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    """Resolves only the allow-listed names; storages become placeholders by key."""

    def __init__(self, file, storages):
        super().__init__(file)
        self.storages = storages

    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(
                f"{module}.{name} is not a tensor, a storage or a dict; refusing to load it"
            )
        return _ALLOWED[(module, name)]

    def persistent_load(self, saved_id):
        if not isinstance(saved_id, tuple) or len(saved_id) < 3 or saved_id[0] != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {saved_id!r:.80}")
        storage_type, key = saved_id[1], str(saved_id[2])
        if len(key) > 80:
            raise pickle.UnpicklingError(f"a storage key of {len(key)} characters")
        numel = saved_id[4] if len(saved_id) > 4 else None
        if not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"storage {key} has no known element type")
        if numel is not None and (type(numel) is not int or numel < 0):
            raise pickle.UnpicklingError(f"storage {key} declares {numel!r:.40} elements")
        if key not in self.storages:
            self.storages[key] = _Storage(storage_type.dtype, key, numel)
        return self.storages[key]


class _Bounded:
    """A read-only view of `limit` bytes of a file: a read past them is refused, not allocated."""

    def __init__(self, file, limit):
        self.file, self.left = file, limit

    def read(self, n=-1):
        if n is None or n < 0 or n > self.left:
            raise ValueError(f"a pickle item declares {n} bytes where {self.left} are left")
        data = self.file.read(n)
        self.left -= len(data)
        return data

    def readline(self):
        line = self.file.readline(min(self.left, _CHUNK))
        self.left -= len(line)
        return line


def _check_pickle(file, limit):
    """Walks the next pickle in `file` without building it, refusing a declared size that is
    not there before `pickle` allocates it; leaves `file` where it was."""
    start = file.tell()
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(_Bounded(file, limit))):
            if "PUT" in opcode.name and isinstance(arg, int) and arg > count:
                raise ValueError(f"memo index {arg} after {count} items")
    except ValueError as err:
        raise pickle.UnpicklingError(str(err)) from None
    file.seek(start)


def _load(path, file, limit, storages):
    try:
        _check_pickle(file, limit)
        return _Unpickler(file, storages).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError) as err:
        raise KerasSaatError(f"{path}: not a PyTorch state_dict file: {err}") from None
    except MemoryError:
        raise KerasSaatError(
            f"{path}: not a PyTorch state_dict file (a pickle too large to read)"
        ) from None


def _refuse(path, what, problem):
    return KerasSaatError(f"{path}: {what} {problem}; the file is damaged or crafted")


def _storage_bytes(path, storage, available, total):
    """The bytes `storage` needs, checked against what the file holds for it and the running
    `total` before anything is read."""
    itemsize = np.dtype(storage.dtype).itemsize
    if storage.numel is None:
        raise _refuse(path, f"storage {storage.key}", "declares no element count")
    needed = storage.numel * itemsize
    if needed != available:
        raise _refuse(
            path,
            f"storage {storage.key}",
            f"declares {storage.numel} elements ({needed} bytes) but the file holds {available}",
        )
    if total + needed > MAX_CHECKPOINT_BYTES:
        raise _refuse(
            path, f"storage {storage.key}", f"takes the storages past {MAX_CHECKPOINT_BYTES} bytes"
        )
    return needed


def _read_member(archive, info, needed):
    """Exactly `needed` bytes of a zip member, read in chunks so inflation stops there."""
    buffer = bytearray(needed)
    view = memoryview(buffer)
    with archive.open(info) as member:
        done = 0
        while done < needed:
            got = member.readinto(view[done : done + _CHUNK])
            if not got:
                break
            done += got
        extra = member.read(1)
    if done != needed or extra:
        raise KerasSaatError(
            f"{archive.filename}: {info.filename} does not inflate to {needed} bytes"
        )
    return buffer


def _read_zip(path):
    storages = {}
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise KerasSaatError(f"{path}: not a readable zip file: {err}") from None
    with archive:
        members = {info.filename: info for info in archive.infolist()}
        pickled = next((n for n in members if n.endswith("/data.pkl")), None)
        if pickled is None:
            raise KerasSaatError(f"{path}: a zip file without data.pkl is no PyTorch file")
        info = members[pickled]
        if info.file_size > MAX_PICKLE_BYTES:
            raise _refuse(
                path, pickled, f"declares {info.file_size} bytes (limit {MAX_PICKLE_BYTES})"
            )
        data = _read_member(archive, info, info.file_size)
        state = _load(path, io.BytesIO(data), len(data), storages)
        prefix, total = pickled[: -len("data.pkl")], 0
        for key, storage in storages.items():
            info = members.get(f"{prefix}data/{key}")
            if info is None:
                raise KerasSaatError(f"{path}: no data for storage {key}")
            needed = _storage_bytes(path, storage, info.file_size, total)
            total += needed
            storage.array = np.frombuffer(_read_member(archive, info, needed), storage.dtype)
    return state, storages


def _read_legacy(path, size):
    storages = {}
    with open(path, "rb") as file:
        if _load(path, file, size, storages) != _LEGACY_MAGIC:
            raise KerasSaatError(f"{path} is not a PyTorch file (no magic number)")
        _load(path, file, size - file.tell(), storages)  # protocol version
        info = _load(path, file, size - file.tell(), storages)
        if not isinstance(info, dict) or not info.get("little_endian", True):
            raise KerasSaatError(f"{path} was saved big-endian; convert it on that machine")
        state = _load(path, file, size - file.tell(), storages)
        keys = _load(path, file, size - file.tell(), storages)
        if not isinstance(keys, list):
            raise KerasSaatError(f"{path}: not a PyTorch state_dict file (no storage list)")
        total = 0
        for key in keys:
            storage = storages.get(str(key))
            head = file.read(8)
            if storage is None or storage.array is not None or len(head) < 8:
                raise KerasSaatError(f"{path} is truncated or lists storage {key!r:.80} wrongly")
            (count,) = struct.unpack("<q", head)
            itemsize = np.dtype(storage.dtype).itemsize
            left = size - file.tell()
            if count < 0 or count * itemsize > left:
                raise _refuse(
                    path,
                    f"storage {storage.key}",
                    f"declares {count} elements; {left} bytes are left",
                )
            storage.numel = count  # the count in front of the bytes is what torch reads
            needed = _storage_bytes(path, storage, count * itemsize, total)
            total += needed
            storage.array = np.frombuffer(file.read(needed), storage.dtype)
    return state, storages


def _tensor_array(path, name, tensor, budget):
    """The tensor's values as a new array, its view checked against its storage first."""
    what = f"tensor {name!r:.80} (storage {tensor.storage.key})"
    data = tensor.storage.array
    if data is None:
        raise KerasSaatError(f"{path}: {what} has no data")
    size, stride, offset = tensor.size, tensor.stride, tensor.offset
    if not (isinstance(size, tuple | list) and isinstance(stride, tuple | list)):
        raise _refuse(path, what, "has no shape or strides")
    numbers = [*size, *stride, offset]
    if any(type(v) is not int or v < 0 for v in numbers) or len(size) != len(stride):
        raise _refuse(
            path, what, f"has shape {size!r:.80}, strides {stride!r:.80}, offset {offset!r:.40}"
        )
    if len(size) > MAX_TENSOR_DIMS:
        raise _refuse(path, what, f"has {len(size)} dimensions (limit {MAX_TENSOR_DIMS})")
    numel = math.prod(size)
    if numel == 0:
        return np.zeros(size, data.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= data.size:
        raise _refuse(path, what, f"reaches element {last} of a storage of {data.size}")
    if numel > data.size:
        raise _refuse(path, what, f"has {numel} elements from a storage of {data.size}")
    if numel * data.itemsize > budget:
        raise _refuse(path, what, f"takes the tensors past {MAX_CHECKPOINT_BYTES} bytes")
    view = np.lib.stride_tricks.as_strided(
        data[offset:], size, [s * data.itemsize for s in stride], writeable=False
    )
    return np.array(view)


def read_state_dict(path):
    """{name: np.ndarray} of the tensors in a PyTorch state_dict `.pth` file (torch's legacy
    or zip layout); a KerasSaatError when it is not a state_dict, names anything but
    tensors, or declares a size that is not there or is over `MAX_CHECKPOINT_BYTES`."""
    path = str(path)
    size = os.path.getsize(path)
    if size > MAX_CHECKPOINT_BYTES:
        raise KerasSaatError(
            f"{path} is {size} bytes, over the {MAX_CHECKPOINT_BYTES} a backbone checkpoint may be"
        )
    state, _ = _read_zip(path) if zipfile.is_zipfile(path) else _read_legacy(path, size)
    if not isinstance(state, dict):
        raise KerasSaatError(f"{path} holds a {type(state).__name__}, not a state_dict")
    arrays, budget = {}, MAX_CHECKPOINT_BYTES
    for name, value in state.items():
        if isinstance(value, _Tensor):
            arrays[str(name)] = array = _tensor_array(path, name, value, budget)
            budget -= array.nbytes
    return arrays
