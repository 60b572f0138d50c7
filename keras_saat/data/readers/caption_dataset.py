"""Records shared by every reader, and the accounting of skipped bad data."""

import collections
import dataclasses
import functools
from pathlib import Path

from keras_saat.errors import KerasSaatError
from keras_saat.text.tokenizer import has_words, tokenize

SPLITS = ("train", "val", "test")


class Skips:
    """Counts skipped bad data by reason, remembering where; with `strict=True` the first
    skip raises a KerasSaatError naming the offender."""

    def __init__(self, strict=False):
        self.strict = strict
        self.where = collections.defaultdict(list)

    def add(self, reason, where):
        if self.strict:
            raise KerasSaatError(
                f"{where}: {reason} (strict mode; drop --strict to skip and count these)"
            )
        self.where[reason].append(str(where))

    def merge(self, other):
        for reason, places in other.where.items():
            for place in places:
                self.add(reason, place)

    @property
    def total(self):
        return sum(len(v) for v in self.where.values())

    def summary(self):
        """One line per reason: count and the first offender."""
        return [
            f"skipped {len(v)} x {reason} (first: {v[0]})"
            for reason, v in sorted(self.where.items())
        ]


@dataclasses.dataclass
class ImageRecord:
    """One image and its reference captions.

    Args:
        imgid: int. The image's id in its dataset (COCO image id, Karpathy imgid, ...).
        path: Path or None. The image file; None when the reader streams images (TFDS).
        split: str. "train", "val" or "test".
        captions: list of str. Reference captions as written (punctuation and case kept).
        objects: list of dict or None. Shapes world ground truth (shape, colour, size, cell, box).
        stream_position: int or None. Position in a streamed split (TFDS). Defaults to None.
        stamp: str or None. The file's "size|mtime_ns" as its reader found it, which the
            feature cache fingerprints without a second stat. Defaults to None (not looked up).
    """

    imgid: int
    path: Path | None
    split: str
    captions: list
    objects: list | None = None
    stream_position: int | None = None
    stamp: str | None = None

    @functools.cached_property
    def references(self):
        """Tokenised captions (`keras_saat.text.tokenize`), as BLEU and the vocabulary use them."""
        return [tokenize(c) for c in self.captions]

    @property
    def name(self):
        return self.path.name if self.path is not None else str(self.imgid)


@dataclasses.dataclass
class CaptionDataset:
    """All images of a dataset, with what was skipped while reading it.

    Args:
        name: str. Dataset name.
        records: list of ImageRecord.
        skips: Skips. Bad lines or captions skipped by the reader.
        image_source: callable or None. For streamed datasets (TFDS):
            `image_source(split) -> tf.data.Dataset` of encoded image bytes, in the
            order of `split(split)`. None means the images are files at `record.path`.
    """

    name: str
    records: list
    skips: Skips = dataclasses.field(default_factory=Skips)
    image_source: object = None

    def split(self, name):
        """The records of split `name` ("train", "val" or "test"), in reading order."""
        return [r for r in self.records if r.split == name]

    @property
    def train(self):
        """The training records: what `Captioner.fit` and `Captioner.from_records` take."""
        return self.split("train")

    @property
    def val(self):
        """The validation records (`fit(validation_data=...)`, `CaptionMetrics`)."""
        return self.split("val")

    @property
    def test(self):
        """The test records."""
        return self.split("test")

    def counts(self):
        return {s: sum(r.split == s for r in self.records) for s in SPLITS}


def add_caption(captions, text, where, skips):
    """Appends a caption unless it is empty after tokenisation (then it is skipped and counted)."""
    if not isinstance(text, str):
        raise KerasSaatError(f"{where}: expected a caption string, got {type(text).__name__}")
    if not has_words(text):  # the vocabulary tokenises each caption once, later
        skips.add("empty caption", where)
        return
    captions.append(text)


def finish(name, records, skips, source, image_source=None):
    """Drops images left with no caption (counted) and checks that something is left."""
    for record in records:
        if not record.captions:
            skips.add("image without captions", f"{source}: image {record.imgid}")
    kept = [record for record in records if record.captions]
    if not kept:
        raise KerasSaatError(f"{source} lists no images with captions")
    return CaptionDataset(name=name, records=kept, skips=skips, image_source=image_source)


def check_file(path, what, hint=""):
    path = Path(path)
    if not path.is_file():
        raise KerasSaatError(f"{what} not found: {path}{hint}")
    return path
