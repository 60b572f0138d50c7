"""An experiment's inputs: the dataset, the vocabulary, the backbone's weights and the
feature cache, each read or made once in the workdir."""

import contextlib
import dataclasses
import json
import time
from pathlib import Path

import keras

from keras_saat.data.feature_cache.borrowed_cache import check_borrowable, open_finished
from keras_saat.data.feature_cache.cache_format import format_name
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.feature_cache.feature_extraction import extract_features
from keras_saat.data.readers.reader_registry import get_reader
from keras_saat.encoders.image_encoder import ImageEncoder
from keras_saat.encoders.packaged_shapes_cnn import (
    load_packaged,
    packaged_shapes_cnn,
    world_record,
)
from keras_saat.encoders.registry import get_backbone_spec
from keras_saat.encoders.shapes_cnn import VARIANTS as SHAPES_CNNS
from keras_saat.encoders.shapes_cnn import attribute_accuracy
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.backbone_pretraining import (
    check_shapes_dataset,
    image_size_of,
    pretrain_backbone,
    pretraining_record,
    training_scenes_digest,
)
from keras_saat.images.decoding import load_images
from keras_saat.io_utils import atomic_path, file_sha256, write_json_atomic
from keras_saat.text.vocabulary import Vocabulary
from keras_saat.workdir import (
    BACKBONE_RECORD_FILE,
    BACKBONE_WEIGHTS_FILE,
    FEATURES_DIR,
    VOCAB_FILE,
    workdir_lock,
)


def load_dataset(config, workdir, log=print, redraw=False):
    """Reads the configured dataset with its registered reader and logs what was skipped;
    with `redraw` (training and extraction only), a generated dataset (the Shapes world) may
    replace the one in `workdir` drawn under other settings."""
    reader = get_reader(config.data.dataset)
    options = {"redraw": redraw} if getattr(reader, "redraws", False) else {}
    dataset = reader(config.data, workdir, log, **options)
    for split, count in dataset.counts().items():
        if count == 0:
            raise KerasSaatError(
                f"dataset '{dataset.name}' has no '{split}' images; train, val and test are all needed"
            )
    counts = ", ".join(f"{n} {s}" for s, n in dataset.counts().items())
    log(f"dataset '{dataset.name}': {counts} images")
    for line in dataset.skips.summary():
        log(f"  {line}")
    return dataset


def build_vocabulary(data, dataset, workdir, log=print):
    """The training split's vocabulary (`data.vocab_size`, `data.min_count`), saved in the workdir."""
    references = (c for r in dataset.split("train") for c in r.references)
    vocabulary = Vocabulary.build(references, data.vocab_size, data.min_count)
    vocabulary.save(Path(workdir) / VOCAB_FILE)
    log(f"vocabulary: {len(vocabulary)} tokens (4 special) -> {Path(workdir) / VOCAB_FILE}")
    return vocabulary


def check_pretrained_for(backbone, path):
    """Refuses the pre-trained Shapes CNN in `path` when `backbone.json` records another
    variant than `backbone` (the `_norm` variants share the weights' shapes but not their
    features); a file without a record is taken as a non-`_norm` variant's."""
    record = path.parent / BACKBONE_RECORD_FILE
    try:
        made_for = json.loads(record.read_text())["backbone"] if record.exists() else None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise KerasSaatError(
            f"{record} does not say which Shapes CNN {path.name} was pre-trained for ({err}); "
            f"move both away to pre-train {backbone} again"
        ) from None
    if made_for == backbone or (made_for is None and not SHAPES_CNNS[backbone]["standardize"]):
        return
    was = made_for or "a Shapes CNN without the standardising stem (no backbone.json)"
    raise KerasSaatError(
        f"{path} was pre-trained for {was}, and model.backbone is {backbone}: its weights "
        f"would load and give other features. Move it away (with {record.name}) to pre-train "
        f"{backbone} in this workdir, or set model.backbone back"
    )


def pretraining_difference(train, path):
    """None when the Shapes CNN in `path` was pre-trained as `train` asks, else a line saying
    how it was and what is asked."""
    record = path.parent / BACKBONE_RECORD_FILE
    try:
        made = json.loads(record.read_text()).get("pretraining") if record.exists() else None
    except (OSError, ValueError, AttributeError):
        made = None  # check_pretrained_for refuses an unreadable record first
    asked = pretraining_record(train)
    if made == asked:
        return None
    return (
        f"{path.name} was pre-trained with {json.dumps(made) if made else 'settings not recorded'}"
        f", and this config asks for {json.dumps(asked)}; it is kept, as the features of a "
        f"trained decoder come from it: move it away (with {BACKBONE_RECORD_FILE}) to pre-train anew"
    )


def prepare_backbone_weights(config, dataset, workdir, log=print):
    """Returns the ModelConfig to build with; pre-trains the Shapes CNN for backbone_weights 'shapes'."""
    model = config.model
    if model.backbone_weights != "shapes":
        return model
    if model.backbone not in SHAPES_CNNS:
        raise KerasSaatError(
            f"backbone_weights 'shapes' (attribute pre-training) needs a Shapes CNN backbone "
            f"({', '.join(SHAPES_CNNS)}); got {model.backbone}"
        )
    path = Path(workdir) / BACKBONE_WEIGHTS_FILE
    if path.exists():
        check_pretrained_for(model.backbone, path)
        check_pretrained_on(path, dataset)
        log(f"using the pre-trained Shapes CNN in {path}")
        if difference := pretraining_difference(config.train, path):
            log(f"  note: {difference}")
        return dataclasses.replace(model, backbone_weights=str(path))
    check_shapes_dataset(dataset)
    packaged = packaged_for(config, dataset)
    record = {"backbone": model.backbone, "pretraining": pretraining_record(config.train)}
    if packaged:
        weights, made = packaged
        backbone, trainer = load_packaged(model.backbone, weights, made)
        log(
            f"the Shapes CNN packaged with keras_saat ({weights.name}: pre-trained as this "
            f"run would, on this world's {made['scenes']:,} scenes; "
            "train.backbone_packaged=false pre-trains it here), frozen"
        )
        val = dataset.split("val")
        images = load_images([r.path for r in val], made["image_size"], config.data.resize)
        accuracy = attribute_accuracy(trainer, images, [r.objects for r in val])
        record["packaged"] = {k: made[k] for k in ("world", "scenes", "val_accuracy", "made")}
    else:
        backbone, accuracy = pretrain_backbone(config, dataset, log=log)
    log(f"  val accuracy on object locations: {_scores(accuracy)}")
    with atomic_path(path, suffix=".weights.h5") as tmp:  # Keras asks for that ending
        backbone.save_weights(str(tmp))
    record["training_scenes"] = training_scenes_digest(dataset)
    record["weights_sha256"] = file_sha256(path)
    write_json_atomic(path.parent / BACKBONE_RECORD_FILE, record)
    return dataclasses.replace(model, backbone_weights=str(path))


def check_pretrained_on(path, dataset):
    """Refuses the workdir's pre-trained Shapes CNN when `backbone.json` says it was
    pre-trained on other scenes, or its weights file is not the one it recorded."""
    record_file = path.parent / BACKBONE_RECORD_FILE
    if not record_file.is_file():
        return
    record = json.loads(record_file.read_text())
    move = f"move {path.name} and {BACKBONE_RECORD_FILE} away to pre-train it again here"
    scenes = record.get("training_scenes")
    if scenes is not None and scenes != training_scenes_digest(dataset):
        raise KerasSaatError(
            f"{path} was pre-trained on another Shapes world's scenes than this run's "
            f"({BACKBONE_RECORD_FILE}); {move}, or use a new --workdir"
        )
    expected = record.get("weights_sha256")
    if expected is not None and expected != file_sha256(path):
        raise KerasSaatError(
            f"{path} is damaged: its bytes are not those {BACKBONE_RECORD_FILE} recorded; {move}"
        )


def packaged_for(config, dataset=None):
    """(weights file, record) of the packaged Shapes CNN a run of `config` starts from, or
    None when it pre-trains its own; with the run's `dataset`, only when its training
    scenes are the ones the packaged CNN was pre-trained on."""
    model = config.model
    if not config.train.backbone_packaged or model.backbone_weights != "shapes":
        return None
    pretraining = pretraining_record(config.train)
    size, world = image_size_of(model), world_record(config.data)
    packaged = packaged_shapes_cnn(model.backbone, pretraining, model.seed, size, world)
    if packaged and dataset is not None:  # pre-trained on other scenes than the run's
        if packaged[1].get("training_scenes") != training_scenes_digest(dataset):
            return None
    return packaged


def _scores(accuracy):
    return ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items())


def extract(config, encoder, dataset, workdir, log=print, extractor=extract_features,
            lock_as="evaluate", **options):  # fmt: skip
    """Fills <workdir>/features with the encoder's output for every split (resumable), or
    checks and reads the finished cache `data.feature_cache` names.

    `extractor` is `extract_features` or one with its arguments (Beam's
    `extract_features_beam`), given `options` too. `lock_as` is the command that holds the
    workdir's lock while it writes the cache (None where the caller holds it): a finished
    cache is read without it, an unfinished one written once the lock's holder has ended.
    """
    data = config.data
    if data.feature_cache:  # another workdir's: read, never written
        directory = _borrowed(data)
        log(f"feature cache {directory} (data.feature_cache: read only)")
        open_finished(
            directory, encoder, dataset, data.resize, data.cache_dtype, data.cache_compression, log
        )
        return FeatureCache(directory)
    if lock_as is not None:
        directory, lines = Path(workdir) / FEATURES_DIR, []
        try:
            open_finished(directory, encoder, dataset, data.resize, data.cache_dtype,
                          data.cache_compression, lines.append)  # fmt: skip
        except KerasSaatError:  # not there, unfinished, or written by another run now
            with contextlib.ExitStack() as held:
                _wait_for_lock(held, workdir, lock_as, log)
                return extract(config, encoder, dataset, workdir, log, extractor, None, **options)
        log(f"feature cache {directory} (finished)")
        for line in lines:
            log(line)
        return FeatureCache(directory)
    log(
        f"feature cache {Path(workdir) / FEATURES_DIR} ({format_name(data.cache_dtype, data.cache_compression)}, {data.cache_shard_size} images a shard)"
    )
    start = time.perf_counter()
    cache, _ = extractor(
        encoder,
        dataset,
        Path(workdir) / FEATURES_DIR,
        shard_size=data.cache_shard_size,
        dtype=data.cache_dtype,
        compression=data.cache_compression,
        resize=data.resize,
        strict=data.strict,
        log=log,
        **options,
    )
    log(f"  features ready in {time.perf_counter() - start:.0f}s")
    return cache


def _wait_for_lock(held, workdir, command, log):
    """Enters `workdir_lock` into `held`, waiting while another process fills the cache."""
    told = False
    while True:
        try:
            return held.enter_context(workdir_lock(workdir, command))
        except KerasSaatError as err:
            if " is in use: " not in str(err):  # a lock that cannot be taken at all
                raise
            if not told:
                log(f"{str(err).split('; ')[0]}; waiting for it to end to write the feature cache")
                told = True
            time.sleep(1)


def check_feature_cache(config, workdir):
    """Checks, before the run renders data or pre-trains, that the cache `data.feature_cache`
    names (if any, for a frozen backbone) is finished and no Shapes CNN pre-trains here."""
    model = config.model
    if not config.data.feature_cache or model.trainable_backbone_layers:
        return
    pretrains = (
        model.backbone_weights == "shapes"
        and model.backbone in SHAPES_CNNS  # else prepare_backbone_weights names the mistake
        and not (Path(workdir) / BACKBONE_WEIGHTS_FILE).is_file()
        and not packaged_for(config)  # the packaged CNN is every run's alike
    )
    check_borrowable(_borrowed(config.data), pretrains)


def _borrowed(data):
    return Path(data.feature_cache).expanduser()


def extract_only(config, workdir, log=print, extractor=extract_features, **options):
    """`keras-saat extract-features`: dataset, backbone weights and cache, no training."""
    get_backbone_spec(config.model.backbone)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    with workdir_lock(workdir, "extract-features"):
        check_feature_cache(config, workdir)
        dataset = load_dataset(config, workdir, log, redraw=True)
        model = prepare_backbone_weights(config, dataset, workdir, log)
        # Seeded as build_captioner seeds it, so `train` finds the same encoder and reuses the cache.
        keras.utils.set_random_seed(model.seed)
        encoder = ImageEncoder(model.backbone, model.image_size or None, model.backbone_weights)
        return extract(config, encoder, dataset, workdir, log, extractor, None, **options)
