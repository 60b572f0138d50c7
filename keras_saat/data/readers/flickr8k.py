"""Reader for Flickr8k's own files: Flickr8k.token.txt and the split lists."""

from pathlib import Path

from keras_saat.data.readers.caption_dataset import (
    ImageRecord,
    Skips,
    add_caption,
    check_file,
    finish,
)
from keras_saat.errors import KerasSaatError

SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "val": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}


def _lines(path, skips):
    """(line number, text) of a text file; a line that is not UTF-8 is skipped and counted."""
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            skips.add("line that is not UTF-8", f"{path}:{number}")


def read_flickr8k(token_file, images_dir=None, split_files=None, strict=False):
    """Reads Flickr8k.token.txt (`name.jpg#k<TAB>caption`) with the train/dev/test lists.

    Args:
        token_file: str or Path. Flickr8k.token.txt.
        images_dir: str, Path or None. Folder of the JPEG files. Defaults to None
            (`Flicker8k_Dataset` beside the token file, the archive's own name).
        split_files: dict or None. Split name -> list file. Defaults to None
            (Flickr_8k.trainImages.txt, .devImages.txt, .testImages.txt beside the token file).
        strict: bool. Raise on the first bad line or empty caption. Defaults to False.

    Returns:
        A CaptionDataset; images in no split list are left out.
    """
    token_file = check_file(token_file, "Flickr8k token file")
    folder = token_file.parent
    images_dir = Path(images_dir) if images_dir else folder / "Flicker8k_Dataset"
    split_files = split_files or {s: folder / name for s, name in SPLIT_FILES.items()}
    skips = Skips(strict)
    split_of = {}
    for split, list_file in split_files.items():
        list_file = check_file(list_file, f"Flickr8k {split} list")
        for _, line in _lines(list_file, skips):
            if line.strip():
                split_of[line.strip()] = split
    records = {}
    for number, line in _lines(token_file, skips):
        if not line.strip():
            continue
        where = f"{token_file}:{number}"
        name_part, tab, caption = line.partition("\t")
        name, hash_, k = name_part.partition("#")
        if not tab or not hash_ or not k.strip().isdigit():
            raise KerasSaatError(f"{where}: expected 'name.jpg#k<TAB>caption', got {line[:60]!r}")
        if name not in split_of:
            continue
        if name not in records:
            records[name] = ImageRecord(
                imgid=len(records), path=images_dir / name, split=split_of[name], captions=[]
            )
        add_caption(records[name].captions, caption, where, skips)
    for name in sorted(set(split_of) - set(records)):
        skips.add(
            "listed image without captions", f"{name} (in a split list, not in {token_file.name})"
        )
    return finish("flickr8k", list(records.values()), skips, str(token_file))
