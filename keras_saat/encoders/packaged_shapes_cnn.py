"""Pre-trained Shapes CNNs packaged with the library, as ImageNet weights are for a VGG:
a run with `model.backbone_weights: shapes` starts from one when it was pre-trained as
the run's config asks, instead of pre-training its own (`train.backbone_packaged`).

`weights/<backbone>.weights.h5` holds the attribute pre-training model's weights, the
CNN's and its heads' (`keras_saat.encoders.shapes_cnn.attribute_trainer`), so a run can
say how well the CNN names the objects of its own validation scenes. `weights/<backbone>.json`
says how they were made: the pre-training's settings (as backbone.json records them),
the seed and image size, the Shapes world it saw, its validation accuracy per attribute,
and the command, commit, machine and date (`python tools/package_shapes_cnn.py` makes
them again).
"""

import json
from pathlib import Path

from keras_saat.encoders.shapes_cnn import VARIANTS, attribute_trainer, build_shapes_cnn

WEIGHTS_DIR = Path(__file__).parent / "weights"


def packaged_files(backbone):
    """(weights file, record file) of `backbone`'s packaged pre-training."""
    return WEIGHTS_DIR / f"{backbone}.weights.h5", WEIGHTS_DIR / f"{backbone}.json"


def packaged_shapes_cnn(backbone, pretraining, seed, image_size):
    """The packaged pre-training of `backbone` when it was made as asked, else None.

    Args:
        backbone: str. A Shapes CNN variant (`VARIANTS`).
        pretraining: dict. The pre-training's settings (`pretraining_record`).
        seed: int. The pre-training's seed (`model.seed`).
        image_size: int. The CNN's input side.

    Returns:
        (weights file, record dict), or None when none is packaged or it was made otherwise.
    """
    weights, record_file = packaged_files(backbone)
    if backbone not in VARIANTS or not weights.is_file() or not record_file.is_file():
        return None
    record = json.loads(record_file.read_text())
    asked = {"backbone": backbone, "pretraining": pretraining, "seed": seed}
    if any(record.get(key) != value for key, value in asked.items()):
        return None
    if record.get("image_size") != image_size:
        return None
    return weights, record


def load_packaged(backbone, weights, record):
    """The packaged pre-training model: (the CNN, the attribute trainer around it).

    Args:
        backbone: str. The variant `weights` was made for.
        weights: path. Its `.weights.h5` file.
        record: dict. Its record (`packaged_shapes_cnn`).
    """
    size = record["image_size"]
    cnn = build_shapes_cnn((size, size, 3), **VARIANTS[backbone])
    trainer = attribute_trainer(cnn, record["pretraining"]["augment"], record["seed"])
    trainer.load_weights(str(weights))
    return cnn, trainer
