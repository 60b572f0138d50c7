"""Dataset reader registry: `data.dataset` name -> a function that reads it.

A reader is `read(data_config, workdir, log) -> CaptionDataset`, added with
`register_reader("name", read)`. It may declare `input_files`, the `data` keys naming
files it opens, which `check_inputs` checks before TensorFlow loads.
"""

from pathlib import Path

from keras_saat.errors import KerasSaatError
from keras_saat.registries import Registry
from keras_saat.workdir import (
    BACKBONE_RECORD_FILE,
    BACKBONE_WEIGHTS_FILE,
    CHECKPOINT_DIR,
    DATA_DIR,
    MODEL_FILE,
)

READERS = Registry("dataset reader")
register_reader = READERS.register
available_readers = READERS.names
get_reader = READERS.get


def _required_path(data, key="path"):
    if not (value := getattr(data, key)):
        raise KerasSaatError(
            f"data.{key} must name the dataset file when data.dataset is {data.dataset}"
        )
    return value


def _shapes(data, workdir, log, redraw=False):
    """The Shapes world, generated into <workdir>/data when data.path is empty and missing.
    A world of other settings is refused when data.path names it or a model learned from it
    (one drawn otherwise only in its varied scenes is then read with a note), else drawn
    anew with `redraw` only (scoring never redraws)."""
    from keras_saat.data.readers.karpathy import read_karpathy
    from keras_saat.data.shapes_dataset import (
        DATASET_FILE,
        describe_generator_settings,
        generator_settings,
        stored_generator_settings,
        write_shapes_dataset,
    )

    path = Path(data.path) if data.path else Path(workdir) / DATA_DIR / DATASET_FILE
    wanted = generator_settings(
        data.shapes_train, data.shapes_val, data.shapes_test, data.shapes_seed,
        data.shapes_varied, data.shapes_varied_copies,
    )  # fmt: skip
    stored = stored_generator_settings(path) if path.is_file() else None
    if stored is not None and stored != wanted:
        described, asked = describe_generator_settings(stored), describe_generator_settings(wanted)
        drawn = ("varied_pages", "varied_light", "varied_camera")  # how: no setting changes it
        only_drawn = {k: v for k, v in stored.items() if k not in drawn} == {
            k: v for k, v in wanted.items() if k not in drawn
        }
        learned = (Path(workdir) / name for name in (MODEL_FILE, CHECKPOINT_DIR))
        trained = next((p for p in learned if p.exists()), None)  # what learned from the world
        if trained is not None and only_drawn:
            log(
                f"note: the Shapes world in {path.parent} is {described}, and this version "
                f"draws {asked}; it is read as it is, since {trained} was trained on it (a new "
                "--workdir trains on a world drawn anew)"
            )
            return read_karpathy(path, data.images_dir or None, strict=data.strict)
        keys = "data.shapes_train/val/test/seed/varied/varied_copies"
        if data.path:
            how = f"set {keys} to match it"
            if only_drawn:
                how = (
                    "its varied scenes were drawn on other pages or under other light than "
                    "this version draws, which no setting changes: move it away to generate "
                    "it anew there"
                )
            raise KerasSaatError(
                f"{path} holds a Shapes world of {described}, but the config asks for {asked}; "
                f"{how}, or point data.path at a new file to generate one"
            )
        if trained is not None:
            raise KerasSaatError(
                f"{path} holds the Shapes world of {described} that {trained} was trained "
                f"on, and the config asks for {asked}; set {keys} to match it. To score the "
                "model on another world, point data.path at a new file (generated there) and "
                "--out at a folder for its scores; to train on one, use a new --workdir, or "
                "move model.keras and checkpoints/ away to draw it anew here"
            )
        if not redraw:
            raise KerasSaatError(
                f"{path} holds a Shapes world of {described}, and the config asks for {asked}; "
                "scoring never redraws a folder's world: give --out a folder of its own (the "
                f"world is drawn beside it) or set {keys} to match it"
            )
        log(f"the Shapes world in {path.parent} is {described}; generating {asked}")
        path.unlink()
        # The CNN pre-trained on the old world goes with it (the feature cache notices
        # the new images by itself).
        for name in (BACKBONE_WEIGHTS_FILE, BACKBONE_RECORD_FILE):
            (Path(workdir) / name).unlink(missing_ok=True)
    if not path.exists():
        log(
            f"generating the Shapes world in {path.parent} "
            f"({data.shapes_train}/{data.shapes_val}/{data.shapes_test} images, seed {data.shapes_seed})"
        )
        write_shapes_dataset(
            path.parent, data.shapes_train, data.shapes_val, data.shapes_test, data.shapes_seed,
            log, varied=data.shapes_varied, varied_copies=data.shapes_varied_copies,
        )  # fmt: skip
    return read_karpathy(path, data.images_dir or None, strict=data.strict)


def _karpathy(data, workdir, log):
    from keras_saat.data.readers.karpathy import read_karpathy

    return read_karpathy(_required_path(data), data.images_dir or None, strict=data.strict)


def _flickr8k(data, workdir, log):
    from keras_saat.data.readers.flickr8k import read_flickr8k

    return read_flickr8k(_required_path(data), data.images_dir or None, strict=data.strict)


def _coco(data, workdir, log):
    from keras_saat.data.readers.coco import read_coco

    path = _required_path(data)
    if not data.val_path:
        raise KerasSaatError(
            "data.val_path must name captions_val2014.json when data.dataset is coco"
        )
    return read_coco(path, data.val_path, data.images_dir or None, strict=data.strict)


def _captions(data, workdir, log):
    from keras_saat.data.readers.caption_table import read_caption_table

    return read_caption_table(_required_path(data), data.images_dir or None, strict=data.strict)


def _tfds(data, workdir, log):
    from keras_saat.data.readers.tfds_reader import read_tfds

    return read_tfds(data.path or "coco_captions", data.tfds_data_dir or None, strict=data.strict)


register_reader("shapes", _shapes)
register_reader("karpathy", _karpathy)
register_reader("flickr8k", _flickr8k)
register_reader("coco", _coco)
register_reader("tfds", _tfds)
register_reader("captions", _captions)

_shapes.redraws = True  # takes `redraw`: whether it may replace a folder's world
_karpathy.input_files = ("path",)
_flickr8k.input_files = ("path",)
_coco.input_files = ("path", "val_path")
_captions.input_files = ("path",)


def check_inputs(data):
    """Raises KerasSaatError unless the reader `data.dataset` names is known, the files its
    `input_files` (keys of `data`) name exist, and so does `data.images_dir` if given."""
    reader = get_reader(data.dataset)
    for key in getattr(reader, "input_files", ()):
        value = _required_path(data, key)
        if not Path(value).is_file():
            raise KerasSaatError(f"dataset file not found: {value} (data.{key})")
    if data.images_dir and not Path(data.images_dir).is_dir():
        raise KerasSaatError(f"image folder not found: {data.images_dir} (data.images_dir)")
