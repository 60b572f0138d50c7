"""CaptionImages: file patterns -> caption rows (`keras-saat caption --out`'s fields), as
a Beam transform; failures become error rows, never a failed bundle."""

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference

from keras_saat.beam.model_handler import BATCH_SIZE, ImageFile, SavedModelHandler, is_remote
from keras_saat.errors import KerasSaatError
from keras_saat.images.image_files import find_images


def caption_row(image, caption=None, log_prob=None, error="", novelty=None, familiar=None):
    """One output row for the image at path `image`, as `CaptionFile.write` writes it:
    log_prob rounded to 5 decimals, novelty to 4 (None when not measured, NaN), error ""
    when captioned."""
    measured = novelty is not None and novelty == novelty
    return {
        "image": str(image),
        "caption": caption,
        "log_prob": None if log_prob is None else round(float(log_prob), 5),
        "novelty": round(float(novelty), 4) if measured else None,
        "familiar": None if familiar is None else bool(familiar),
        "error": error,
    }


def expand_patterns(patterns):
    """Image paths (str) from paths, folders and patterns (str), in a stable order,
    expanded as `keras-saat caption` does (remote ones by Beam); an unmatched one is kept."""
    paths = []
    for pattern in patterns:
        pattern = str(pattern)
        if not is_remote(pattern):
            paths += [str(p) for p in find_images([pattern])]
            continue
        matched = remote_call(pattern, FileSystems.match, [pattern])[0].metadata_list
        paths += sorted(m.path for m in matched) or [pattern]
    return paths


def remote_call(path, function, *args):
    """`function(*args)` of Beam's FileSystems on `path`; a KerasSaatError of one line when
    no file system serves the path's scheme (gs:// needs apache-beam[gcp]) or it refuses."""
    try:
        return function(*args)
    except ValueError:  # the scheme's file system is not installed
        scheme = str(path).split("://")[0]
        extra = {"s3": "aws", "azfs": "azure"}.get(scheme, "gcp")
        raise KerasSaatError(
            f"{_one_line(path, 200)}: Beam has no file system for {scheme}:// here; "
            f'pip install "apache-beam[{extra}]"'
        ) from None
    except OSError as err:
        raise KerasSaatError(_one_line(f"{path}: {err}")) from None


def _match(pattern):
    """One argument's paths; one that matches nothing is kept (its error row)."""
    try:
        return expand_patterns([pattern])
    except KerasSaatError:  # a folder with no images: its row says so
        return [pattern]


def _one_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _to_row(element):
    (key, path), result = element
    out = result.inference
    error = out["error"].decode("utf-8", "replace") if isinstance(out["error"], bytes) else ""
    if not bool(out["valid"]):
        return key, caption_row(path, error=error or "the model refused the image")
    caption = out["caption"]
    caption = caption.decode("utf-8", "replace") if isinstance(caption, bytes) else str(caption)
    novelty, familiar = out.get("novelty"), out.get("familiar")
    return key, caption_row(path, caption, float(out["log_prob"]), "", novelty, familiar)


def _exception_line(exception):
    """'Type: message' of a dead-letter record's exception (the traceback's last line)."""
    if isinstance(exception, BaseException):
        return _one_line(f"{type(exception).__name__}: {exception}")
    *_, lines = exception
    return _one_line(lines[-1] if lines else str(exception))


def _failed_rows(failure):
    """A dead-letter record (the batch, (type, repr, traceback lines)) -> one error row
    per image of the batch."""
    batch, exception = failure
    error = f"the model raised {_exception_line(exception)}"
    for (key, path), _ in batch if isinstance(batch, list) else [batch]:
        yield key, caption_row(path, error=error)


class CaptionKeyedImages(beam.PTransform):
    """(key, image path) pairs -> (key, row) pairs; the key travels with its image.

    Args:
        handler: SavedModelHandler, or the SavedModel folder (str) to build one.
        batch_size: int. With a folder: images per model call. Defaults to BATCH_SIZE.
        large_model: bool. With a folder: one model copy per machine. Defaults to False.
    """

    def __init__(self, handler, batch_size=BATCH_SIZE, large_model=False):
        super().__init__()
        if not isinstance(handler, SavedModelHandler):
            handler = SavedModelHandler(handler, batch_size=batch_size, large_model=large_model)
        self._handler = handler

    def expand(self, pairs):
        # The files are read by the handler, a model call at a time (ImageFile).
        files = pairs | "Files" >> beam.Map(lambda pair: (pair, ImageFile(pair[1])))
        results, dead = (
            files
            | "Caption" >> RunInference(KeyedModelHandler(self._handler)).with_exception_handling()
        )
        rows = results | "Rows" >> beam.Map(_to_row)
        failed = dead.failed_inferences | "FailedRows" >> beam.FlatMap(_failed_rows)
        return (rows, failed) | "AllRows" >> beam.Flatten()


class CaptionImages(beam.PTransform):
    """File patterns (str) -> caption rows (dict), one per image, spread over the workers.
    Takes `CaptionKeyedImages`' arguments."""

    def __init__(self, handler, batch_size=BATCH_SIZE, large_model=False):
        super().__init__()
        self._caption = CaptionKeyedImages(handler, batch_size, large_model)

    def expand(self, patterns):
        return (
            patterns
            | "Match" >> beam.FlatMap(_match)
            | "Spread" >> beam.Reshuffle()
            | "Key" >> beam.Map(lambda path: (None, path))
            | "CaptionKeyed" >> self._caption
            | "Unkey" >> beam.Values()
        )


__all__ = ["CaptionImages", "CaptionKeyedImages", "caption_row", "expand_patterns"]
