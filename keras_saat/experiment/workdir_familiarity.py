"""A trained workdir's familiarity, fitted from the data the run already has.

`keras-saat train` (and the demo) ends with `calibrate_workdir`: the best model's
familiarity statistics (`Captioner.calibrate_familiarity`) from the feature cache's
train split, the threshold from held-out training folds and the val split, written
back into model.keras. The statistics come from the run's own training world, so a
world with more kinds of scenes widens what reads as familiar on the next run.
"""

from pathlib import Path

from keras_saat.data.feature_cache.shard_checks import naming_damaged_shards
from keras_saat.data.pipeline.image_file_source import ImageFiles
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.preparation import extract, load_dataset
from keras_saat.io_utils import atomic_path
from keras_saat.models.factories import load_captioner
from keras_saat.workdir import MODEL_FILE

BATCH_SIZE = 256  # feature rows read at once


def split_features(model, source, split, records, batch_size=BATCH_SIZE):
    """(B, L, C) backbone features of a split's images, a batch at a time: the cache's
    rows, or the model's encoder over decoded images where the source reads files."""
    encode = None
    for batch in source.evaluation_batches(split, records, batch_size):
        if "features" in batch:
            yield batch["features"].numpy()
            continue
        encode = encode or model.encoder.compiled()
        yield encode(batch["images"]).numpy()


def calibrate_workdir(workdir, config, log=print, prepared=None):
    """Fits the familiarity of the workdir's model.keras and saves it there again.

    Args:
        workdir: path. A trained workdir.
        config: ExperimentConfig. Its config.yaml's.
        log: callable. Defaults to print.
        prepared: (dataset, source) or None. What `train` already has; None reads the
            dataset and the feature cache (or the images, where the backbone trained).

    Returns:
        dict: `calibrate_familiarity`'s summary.
    """
    workdir = Path(workdir)
    model = load_captioner(workdir / MODEL_FILE)
    if prepared is not None:
        dataset, source = prepared
    else:
        dataset = load_dataset(config, workdir, log)
        if model.encoder.trainable_layers:
            source = ImageFiles(model.image_size, config.data.resize)
        else:
            source = extract(config, model.encoder, dataset, workdir, log)
    train, val = dataset.split("train"), dataset.split("val")
    if not train:
        raise KerasSaatError(f"{workdir}: no training images to calibrate familiarity from")
    with naming_damaged_shards(source.shard_files(("train", "val"))):
        summary = model.calibrate_familiarity(
            features=split_features(model, source, "train", train),
            validation=split_features(model, source, "val", val) if val else None,
        )
    with atomic_path(workdir / MODEL_FILE, suffix=".keras") as tmp:
        model.save(tmp)
    log(
        f"familiarity: fitted on {summary['images']} training images' features and "
        f"{summary['unlike_pictures']} unlike pictures; novelty stays at or below 1 for "
        f"{summary['quantile']:.1%} of {summary['images']} held-out training and "
        f"{summary['validation_images']} validation images"
    )
    return summary
