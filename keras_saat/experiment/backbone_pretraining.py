"""The Shapes CNN's attribute pre-training as a run of a config does it: what it reads,
with which settings, and how backbone.json records them. The packaged pre-trained CNNs
(`keras_saat.encoders.packaged_shapes_cnn`) were made by this code, so it is part of the
digest their records hold."""

import hashlib
import json
import time

from keras_saat.encoders.registry import get_backbone_spec
from keras_saat.encoders.shapes_cnn import VARIANTS, pretrain_shapes_cnn
from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import load_images


def image_size_of(model_config):
    return model_config.image_size or get_backbone_spec(model_config.backbone).default_image_size


def pretraining_record(train):
    """What the Shapes CNN's pre-training under `train` (a TrainConfig) does, as
    backbone.json records it beside the weights."""
    from keras_saat.data.camera import camera_settings
    from keras_saat.data.shapes import page_settings

    record = {
        "epochs": train.backbone_pretrain_epochs,
        "extra_scenes": train.backbone_pretrain_scenes,
        "augment": train.backbone_pretrain_augment,
    }
    if train.backbone_pretrain_augment:
        record.update(page_settings(), camera=camera_settings())
    return record


def check_shapes_dataset(dataset):
    """Refuses a dataset without the Shapes world's objects, which the pre-training learns."""
    if any(r.objects is None for r in dataset.records):
        raise KerasSaatError(
            "backbone_weights 'shapes' needs a Shapes dataset (with 'objects' per image)"
        )


def training_scenes_digest(dataset):
    """A digest of the training split's scenes as the pre-training reads them: each file's
    name and the objects drawn in it, in order."""
    scenes = [[r.path.name, r.objects] for r in dataset.split("train")]
    return hashlib.sha256(json.dumps(scenes, sort_keys=True).encode()).hexdigest()[:16]


def pretrain_backbone(config, dataset, trainer_file=None, log=print):
    """Pre-trains the Shapes CNN `config` names on the dataset's training scenes
    (`pretrain_shapes_cnn`); returns (the CNN, val accuracy per attribute).

    Args:
        config: Config. The run's: model.backbone, model.seed, data.resize and the
            train.backbone_pretrain_* settings.
        dataset: Dataset. A Shapes dataset (objects per image).
        trainer_file: path or None. `pretrain_shapes_cnn`'s. Defaults to None.
        log: callable. Receives progress lines. Defaults to print.
    """
    model = config.model
    check_shapes_dataset(dataset)
    train, val = dataset.split("train"), dataset.split("val")
    size = image_size_of(model)
    extra = config.train.backbone_pretrain_scenes
    log(
        f"pre-training the Shapes CNN on {len(train)} training scenes"
        f"{f' and {extra} more rendered for it' if extra else ''} (then frozen)"
    )
    start = time.perf_counter()
    backbone, accuracy = pretrain_shapes_cnn(
        load_images([r.path for r in train], size, config.data.resize),
        [r.objects for r in train],
        load_images([r.path for r in val], size, config.data.resize),
        [r.objects for r in val],
        epochs=config.train.backbone_pretrain_epochs,
        extra_scenes=extra,
        augment=config.train.backbone_pretrain_augment,
        seed=model.seed,
        log=log,
        trainer_file=trainer_file,
        **VARIANTS[model.backbone],
    )
    log(f"  done in {time.perf_counter() - start:.0f}s")
    return backbone, accuracy
