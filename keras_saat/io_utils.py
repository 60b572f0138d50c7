"""Small file helpers shared by the data, training and serving packages."""

import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import time
from pathlib import Path

import yaml

from keras_saat.errors import FileWriteError, write_failure


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """Yields a new temporary path beside `path`; when the block ends, it replaces `path`.

    The temporary is created exclusively (no planted link is followed) and named by
    host, process and a random part, so `sweep_temporaries` can tell a killed writer's;
    `suffix` ends its name, for writers that pick a format by it (".keras", ".npz").
    A block that raises leaves `path` as it was; a refused write raises `FileWriteError`.
    """
    path = Path(path)
    while True:
        owner = f"{socket.gethostname()}-{os.getpid()}"
        tmp = path.with_name(f".{path.name}.{owner}.{secrets.token_hex(6)}.tmp{suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:  # a name taken (by a writer or a planted link): draw again
            continue
        except OSError as err:
            raise_write_failure(err, path, also=tmp)
            raise
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise_write_failure(err, path, also=tmp)
        raise


def raise_write_failure(err, path, also=None):
    """Raises `FileWriteError` naming `path` when `err` is a write the file system refused
    to `path` or within it (or `also`, where it is staged): an error about another file
    (an image read in the block) stays as it is."""
    if isinstance(err, FileWriteError) or not (message := write_failure(err, path)):
        return
    ours = [str(path)] + ([str(also)] if also is not None else [])
    if isinstance(err, OSError):  # a file, or one in the folder, of ours; None: a write()
        about = err.filename is None or str(err.filename).startswith(tuple(ours))
    else:  # TensorFlow's errors name the file in their text
        about = any(name in str(err) for name in ours)
    if about:
        raise FileWriteError(message) from err


def remove_temporaries(folder):
    """Removes the temporaries `atomic_path` left in `folder` when their writer was killed;
    call it when no writer can be running there. Returns how many."""
    pattern = re.compile(r"\..+\.[0-9a-f]{12}\.tmp(\.[a-z]+)?")
    found = [p for p in Path(folder).iterdir() if pattern.fullmatch(p.name) and p.is_file()]
    for path in found:
        path.unlink()
    return len(found)


# A temporary that names no process of this machine is another's after this long untouched.
STALE_AFTER_S = 24 * 3600


def sweep_temporaries(folder, log=print):
    """Removes the temporaries in `folder` whose writer is gone: this machine's ended
    processes', and others' once untouched for STALE_AFTER_S. Logs them; returns how many."""
    host = re.escape(socket.gethostname())
    ours = re.compile(rf"\..+\.{host}-(\d+)\.[0-9a-f]{{12}}\.tmp(\.[a-z]+)?")
    anyone = re.compile(r"\..+\.tmp(\.[a-z]+)?|.+\.tmp-[\w.-]+")
    swept = 0
    for path in Path(folder).iterdir():
        if not path.is_file() or path.is_symlink():
            continue
        found = ours.fullmatch(path.name)
        gone = found is not None and not process_alive(int(found.group(1)))
        stale = anyone.fullmatch(path.name) and time.time() - path.stat().st_mtime > STALE_AFTER_S
        if not (gone or stale):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            swept += 1
    if swept:
        log(f"removed {swept} temporary file(s) of writers that were stopped in {folder}")
    return swept


def process_alive(pid):
    """Whether process `pid` of this machine runs (this one included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def whole_number(text, digits=18):
    """`text` as an int when it is ASCII digits alone, at most `digits` of them (a version
    folder's name, a shard's number, a Content-Length), else None. `str.isdigit()` also
    takes "²", which `int()` refuses, and "٣", which `int()` reads as 3; TF Serving reads
    neither as a version, nor one past int64 (19 digits can be)."""
    if not (text.isascii() and text.isdigit()) or len(text) > digits:
        return None
    return int(text)


def file_sha256(path):
    """The SHA-256 (hex) of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def write_bytes_atomic(path, data):
    """Writes bytes through `atomic_path`: a killed process leaves either the old file or
    the new one, never half of one."""
    with atomic_path(path) as tmp, tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def write_text_atomic(path, text):
    """`write_bytes_atomic` of `text` in UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, content, indent=1):
    """`write_text_atomic` of `content` as JSON."""
    write_text_atomic(path, json.dumps(content, indent=indent))


# Bounds on a YAML document a user gives (a config file, a --set value): a config is two
# levels deep and a few kilobytes, so these refuse only crafted documents.
YAML_MAX_BYTES = 1024 * 1024
YAML_MAX_DEPTH = 32


class _BoundedYamlLoader(yaml.SafeLoader):
    """yaml.SafeLoader without aliases and with a nesting bound (see `load_yaml`)."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) or self.depth >= YAML_MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError(f"an alias (*name) at line {line}; aliases are not allowed")
            raise yaml.YAMLError(f"nested more than {YAML_MAX_DEPTH} levels deep at line {line}")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_yaml(text):
    """Parses a YAML document with yaml.safe_load's types, refusing with yaml.YAMLError
    aliases ("billion laughs"), nesting deeper than YAML_MAX_DEPTH and text over
    YAML_MAX_BYTES as it refuses invalid YAML."""
    if len(text) > YAML_MAX_BYTES:
        raise yaml.YAMLError(f"longer than {YAML_MAX_BYTES} characters")
    loader = _BoundedYamlLoader(text)
    try:
        return loader.get_single_data()
    except ValueError as err:  # an integer of over 4300 digits, which int() refuses
        raise yaml.YAMLError(f"a value that cannot be read: {str(err)[:100]}") from None
    finally:
        loader.dispose()
