"""Image files for captioning: folders and globs expanded, bytes read one file at a time.

find_images(["photos/", "extra/*.jpg", "one.png"])   # -> [Path, ...], sorted per argument
for name, data, error in encoded_images(paths): ...   # never raises for a bad file
"""

import glob
import os
from pathlib import Path

from keras_saat.errors import KerasSaatError

# What `tf.io.decode_image` reads (and TF Serving's decoder): JPEG, PNG, GIF, BMP.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


def is_image_file(path):
    """Whether `path`'s extension is one of IMAGE_EXTENSIONS (any case)."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def find_images(paths):
    """Expands command-line paths into image files, in a stable order.

    A folder gives every image file below it (recursively, sorted); a pattern with
    `*`, `?` or `[` gives its sorted matches that are image files; any other path is
    kept as given (a missing file becomes one error row later, not a failure here).

    Args:
        paths: iterable of str or Path.

    Returns:
        list of Path, each file once, in argument order.

    Raises:
        KerasSaatError: a folder or pattern matched no image file.
    """
    found, seen = [], set()
    for argument in paths:
        argument = str(argument)
        if os.path.isdir(argument):
            matches = sorted(
                Path(root) / name
                for root, _, names in os.walk(argument)
                for name in names
                if is_image_file(name)
            )
            what = f"the folder {argument}"
        elif glob.has_magic(argument):
            matches = sorted(
                Path(p) for p in glob.glob(argument, recursive=True) if is_image_file(p)
            )
            what = f"the pattern {argument!r}"
        else:
            matches, what = [Path(argument)], None
        if what and not matches:
            raise KerasSaatError(f"{what} holds no image files ({', '.join(IMAGE_EXTENSIONS)})")
        for path in matches:
            if path not in seen:
                seen.add(path)
                found.append(path)
    return found


def encoded_images(images):
    """(name, bytes, error) for each path or bytes item, reading one file at a time.

    A file that cannot be read yields empty bytes and an error naming why; nothing
    is decoded here (`keras_saat.serving.image_bytes.decode_images` does that).

    Args:
        images: iterable of paths (str, Path) or encoded image bytes.
    """
    for index, image in enumerate(images):
        if isinstance(image, (bytes, bytearray)):
            yield f"#{index}", bytes(image), ""
            continue
        try:
            yield str(image), Path(image).read_bytes(), ""
        except FileNotFoundError:
            yield str(image), b"", "file not found"
        except IsADirectoryError:
            yield str(image), b"", "a folder, not an image file"
        except OSError as err:
            yield str(image), b"", f"cannot read the file: {err.strerror or err}"
