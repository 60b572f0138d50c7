"""Pre-trained Shapes CNNs packaged with the library, as ImageNet weights are for a VGG:
a run with `model.backbone_weights: shapes` starts from one when it was pre-trained as
the run's config asks, instead of pre-training its own (`train.backbone_packaged`).

`weights/<backbone>.weights.h5` holds the attribute pre-training model's weights (the
CNN's and its heads', `shapes_cnn.attribute_trainer`), so a run can say how well the CNN
names the objects of its own validation scenes; `weights/<backbone>.json` says how they
were made (`python tools/package_shapes_cnn.py` makes them again).
"""

import ast
import hashlib
import json
from pathlib import Path

from keras_saat.encoders.shapes_cnn import VARIANTS, attribute_trainer, build_shapes_cnn
from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import file_sha256

WEIGHTS_DIR = Path(__file__).parent / "weights"
LIBRARY = Path(__file__).parents[1]
# The code that renders the Shapes world and pre-trains the CNN on it. The packaged weights
# are what it made: once it changes they are not what a run would pre-train, and runs
# pre-train their own until they are made again (the record's "sources").
SOURCES = (
    "data/shapes.py",
    "data/camera.py",
    "encoders/shapes_cnn.py",
    "encoders/add_coords.py",
    "images/photometry.py",
    "experiment/backbone_pretraining.py",
)
# What a record holds beyond what `packaged_shapes_cnn` compares (a run reads them).
RECORD_KEYS = ("scenes", "training_scenes", "val_accuracy", "made")


def packaged_files(backbone):
    """(weights file, record file) of `backbone`'s packaged pre-training."""
    return WEIGHTS_DIR / f"{backbone}.weights.h5", WEIGHTS_DIR / f"{backbone}.json"


def sources_digest():
    """A digest of the code of `SOURCES` (its lines without docstrings, comment lines or
    blank lines, which change no weight), or None where they cannot be read (an install
    without its .py files)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        try:
            text = (LIBRARY / name).read_text(encoding="utf-8")
        except OSError:
            return None
        digest.update(f"{name}\0{_code_lines(text)}\0".encode())
    return digest.hexdigest()[:16]


def _code_lines(text):
    """The module's lines of code. Docstrings are found by their line numbers in the
    syntax tree, which every Python version gives alike (its dump does not)."""
    text = text.replace("\r\n", "\n")
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    return "\n".join(
        line.rstrip()
        for number, line in enumerate(text.split("\n"), start=1)
        if number not in docstrings and line.strip() and not line.lstrip().startswith("#")
    )


def _is_docstring(node):
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def world_record(data):
    """The settings of `data` (a DataConfig) that make the Shapes world's training scenes,
    which the pre-training sees."""
    return {
        "dataset": data.dataset,
        "seed": data.shapes_seed,
        "training_split": data.shapes_train,
        "varied": data.shapes_varied,
        "varied_copies": data.shapes_varied_copies,
        "images_dir": data.images_dir,  # the world's own folder when empty
    }


def packaged_shapes_cnn(backbone, pretraining, seed, image_size, world):
    """(weights file, record) of the packaged pre-training of `backbone` when it is what the
    run would make, else None: the same `pretraining` settings (`pretraining_record`), seed
    and image size, on the same Shapes `world` (`world_record`), by the same code.
    `keras_saat.experiment.preparation.packaged_for` also compares the run's training
    scenes, once read, with the record's.
    """
    weights, record_file = packaged_files(backbone)
    if backbone not in VARIANTS or not weights.is_file() or not record_file.is_file():
        return None
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError) as err:
        raise KerasSaatError(
            f"{record_file} cannot be read ({err}): reinstall keras-saat, or set "
            "train.backbone_packaged=false to pre-train the Shapes CNN in the run"
        ) from None
    asked = {
        "backbone": backbone,
        "pretraining": pretraining,
        "seed": seed,
        "image_size": image_size,
        "world": world,
        "sources": sources_digest(),
    }
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in asked.items()):
        return None
    if asked["sources"] is None or any(key not in record for key in RECORD_KEYS):
        return None
    return weights, record


def load_packaged(backbone, weights, record):
    """(the CNN, the attribute trainer around it) of `backbone`'s packaged `weights` file
    and its `record` (`packaged_shapes_cnn`)."""
    expected = record.get("weights_sha256")
    if expected is not None and file_sha256(weights) != expected:
        raise KerasSaatError(
            f"{weights} is damaged: its bytes are not those its record names (weights_sha256); "
            "reinstall keras-saat, or set train.backbone_packaged=false to pre-train the CNN"
        )
    size = record["image_size"]
    cnn = build_shapes_cnn((size, size, 3), **VARIANTS[backbone])
    trainer = attribute_trainer(cnn, record["pretraining"]["augment"], record["seed"])
    trainer.load_weights(str(weights))
    return cnn, trainer


def packaged_backbone(backbone):
    """The Shapes CNN packaged for `backbone`, with its pre-trained weights: what
    `backbone_weights="shapes"` gives a Captioner built in Python (a KerasSaatError when
    none is packaged)."""
    weights, record_file = packaged_files(backbone)
    if not (weights.is_file() and record_file.is_file()):
        packaged = sorted(p.name.removesuffix(".weights.h5") for p in WEIGHTS_DIR.glob("*.h5"))
        raise KerasSaatError(
            f'backbone_weights "shapes": no Shapes CNN is packaged for backbone {backbone!r} '
            f"(packaged: {', '.join(packaged)}); pick one of those, or give a weights file"
        )
    cnn, _ = load_packaged(backbone, weights, json.loads(record_file.read_text()))
    return cnn
