"""Image files for captioning: folders and globs expanded, bytes read one file at a time.

find_images(["photos/", "extra/*.jpg", "one.png"])   # -> [Path, ...], sorted per argument
for name, data, error in encoded_images(paths): ...   # never raises for a bad file
"""

import glob
import os
import re
import stat
from pathlib import Path

from keras_saat.errors import KerasSaatError

# What `tf.io.decode_image` reads (and TF Serving's decoder): JPEG, PNG, GIF, BMP.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")

# The most bytes read from one image file (well over a 25-megapixel JPEG or PNG).
MAX_FILE_BYTES = 64 * 1024 * 1024
# The most encoded bytes in one model call, so a batch's memory follows its bytes.
MAX_BATCH_BYTES = 64 * 1024 * 1024


def is_image_file(path):
    """Whether `path`'s extension is one of IMAGE_EXTENSIONS (any case)."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def find_images(paths):
    """Expands command-line paths into a list of image file Paths, each real file once
    (however many links or loops lead to it), in argument order.

    A folder gives every image file below it (recursively, sorted, symlinked folders
    followed); a pattern with `*`, `?` or `[` gives its sorted image matches (`**` spans
    folders); any other path is kept as given (a missing file becomes an error row later).
    A KerasSaatError when no argument gave an image file and a folder or pattern was given.
    """
    found, seen, empty = [], set(), []
    for argument in paths:
        argument = str(argument)
        if os.path.isdir(argument):
            matches = [p for p in _walk(argument) if is_image_file(p)]
            what = f"the folder {argument}"
        elif glob.has_magic(argument):
            matches = [p for p in _glob(argument) if is_image_file(p)]
            what = f"the pattern {argument!r}"
        else:
            matches, what = [Path(argument)], None
        if what and not matches:
            empty.append(what)
            matches = [Path(argument)]  # an error row of its own (`encoded_images`)
        for path in matches:
            key = os.path.realpath(path)  # symbolic links resolved; a hard link is its own name
            if key not in seen:
                seen.add(key)
                found.append(path)
    if empty and len(empty) == len(found):
        raise KerasSaatError(f"{empty[0]} holds no image files ({', '.join(IMAGE_EXTENSIONS)})")
    return found


def _identity(path):
    """What makes a file itself: its device and inode (its path when it cannot be read)."""
    try:
        stat = os.stat(path)
    except OSError:
        return str(path)
    return (stat.st_dev, stat.st_ino)


def _walk(top):
    """Every file below `top`, sorted, following symlinked folders but each real folder once."""
    files, visited = [], set()
    for root, folders, names in os.walk(top, followlinks=True):
        key = _identity(root)
        if key in visited:  # a loop, or a second link to a folder already walked
            folders[:] = []
            continue
        visited.add(key)
        folders.sort()
        files.extend(Path(root) / name for name in names)
    return sorted(files)


def _glob(pattern):
    """Sorted matches of `pattern`, `**` spanning folders, without following a loop twice."""
    parts = pattern.split(os.sep)
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    top = os.sep.join(parts[:fixed]) or ("." if not pattern.startswith(os.sep) else os.sep)
    regex = re.compile(_translate(parts[fixed:]))
    if not os.path.isdir(top):
        return []
    matches = []
    for path in _walk(top):
        relative = os.path.relpath(path, top).split(os.sep)
        if regex.fullmatch("/".join(relative)):
            matches.append(path if fixed else Path(*relative))  # "*.png" stays relative
    return sorted(matches)


def _translate(parts):
    """A regex for path components: `**` any number of folders, `*`, `?` and `[...]` within
    one component, no wildcard matching a leading dot (as glob)."""
    pieces = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            pieces.append("(?:[^./][^/]*/)*" + ("[^./][^/]*" if last else ""))
            continue
        body, j = "" if part.startswith(".") else "(?!\\.)", 0
        while j < len(part):
            char = part[j]
            close = part.find("]", j + 2) if char == "[" else -1
            if char == "*":
                body += "[^/]*"
            elif char == "?":
                body += "[^/]"
            elif close > 0:
                inside = part[j + 1 : close]
                inside = "^" + inside[1:] if inside.startswith("!") else inside
                body += "[" + inside.replace("\\", "\\\\") + "]"
                j = close
            else:
                body += re.escape(char)
            j += 1
        pieces.append(body + ("" if last else "/"))
    return "".join(pieces)


def encoded_images(images):
    """(name, bytes, error) for each path or encoded bytes in `images`, reading one file at
    a time; a file that cannot be read yields empty bytes and the reason. Nothing is decoded."""
    for index, image in enumerate(images):
        if isinstance(image, (bytes, bytearray)):
            yield f"#{index}", bytes(image), ""
            continue
        name = str(image)
        if not is_utf8(name):
            yield printable(name), b"", "the file name is not valid UTF-8; rename the file"
            continue
        try:
            yield name, read_image_file(name), ""
        except FileNotFoundError:
            missing = "no image file matches the pattern" if glob.has_magic(name) else ""
            yield name, b"", missing or "file not found"
        except IsADirectoryError:
            yield name, b"", "a folder with no image files below it, not an image file"
        except OSError as err:
            yield name, b"", f"cannot read the file: {err.strerror or err}"
        except ValueError as err:
            yield name, b"", str(err)


def read_image_file(path, limit=MAX_FILE_BYTES):
    """The bytes of a regular file of at most `limit` bytes; anything else is refused.

    A link's target is checked before opening, so a device, FIFO or socket is never
    opened; the file is opened non-blocking, checked again, and read to at most
    `limit + 1` bytes. Raises OSError (FileNotFoundError, IsADirectoryError) when it cannot
    be opened, and ValueError, whose message is the row's error, for anything refused.
    """
    _check_regular(os.stat(path).st_mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        _check_regular(info.st_mode)
        if info.st_size > limit:
            raise ValueError(_too_long(info.st_size, limit))
        chunks, size = [], 0
        while size <= limit:  # the stat's size in one read: joining one chunk copies nothing
            chunk = os.read(fd, min(limit + 1 - size, max(info.st_size + 1 - size, 1 << 20)))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(_too_long(None, limit))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_regular(mode):
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(mode)
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        )
        raise ValueError(f"{kind}, not a regular file; give an image file")


def _too_long(size, limit):
    length = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return (
        f"the file is {length}, over the {limit // (1 << 20)} MiB read from one image file; "
        "give a smaller image"
    )


def is_utf8(name):
    """Whether a path string (surrogate-escaped by the OS layer) is valid UTF-8 text."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(name):
    """A path string with the bytes that are not UTF-8 shown as \\xNN."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def batches_by_bytes(items, count, limit=MAX_BATCH_BYTES, size=len):
    """Consecutive lists of `items` of at most `count` items (None: any) and `limit` bytes
    together by `size` (a larger item goes alone), so a batch's memory follows its bytes."""
    run, held = [], 0
    for item in items:
        bytes_ = size(item)
        if run and (held + bytes_ > limit or (count is not None and len(run) >= count)):
            yield run
            run, held = [], 0
        run.append(item)
        held += bytes_
    if run:
        yield run
