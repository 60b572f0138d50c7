"""A finished feature cache another workdir owns, read and never written
(`data.feature_cache`), checked against what this run's own extraction would make."""

import copy
from pathlib import Path

from keras_saat.data.feature_cache.cache_format import extraction_fingerprint, extraction_header
from keras_saat.data.feature_cache.cache_index import (
    INDEX,
    VERSION,
    read_index,
    reopen_changed,
    says_todo,
    todo_shards,
)
from keras_saat.data.readers.caption_dataset import SPLITS
from keras_saat.errors import KerasSaatError
from keras_saat.workdir import BACKBONE_WEIGHTS_FILE, FEATURES_DIR, cache_owner


def open_finished(directory, encoder, dataset, resize, dtype, compression, log=print):
    """The index of a finished cache this run reads and never writes, or a KerasSaatError
    unless every split is whole, no image changed since, and it was made as this run's
    extraction would make it."""
    directory = Path(directory)
    where = f"data.feature_cache {directory}"
    index = _finished_index(directory)
    fingerprint = extraction_fingerprint(encoder, dataset, resize, dtype, compression)
    if index.get("fingerprint") != fingerprint:
        header = extraction_header(encoder, resize, dtype, compression)
        raise KerasSaatError(f"{where} {_other_features(index, fingerprint, header)}")
    for split in SPLITS:
        records = dataset.split(split)
        entry = copy.deepcopy(index["splits"][split])
        changed, retimed = reopen_changed(entry, records, entry["shard_size"])
        if changed:
            raise KerasSaatError(
                f"{where}: images of the {split} split changed since extraction "
                f"({len(changed)} shard(s)); extract them again with keras-saat "
                "extract-features for the workdir that owns the cache"
            )
        if retimed:  # not recorded here (read only): hashed again at every open
            log(
                f"  extract {split}: {len(retimed)} shard(s) kept: new file times, same "
                "bytes (read again at each run: the owner's next extraction records them)"
            )
        says_todo(split, entry, [], len(records), log)
    return index


def check_borrowable(directory, pretrains):
    """Raises KerasSaatError, before the run renders data or pre-trains, unless a finished
    cache is at `directory` and the run `pretrains` no Shapes CNN (whose features would not
    be the cache's)."""
    directory = Path(directory)
    _finished_index(directory)
    if pretrains:
        owner = cache_owner(directory)  # a workdir's cache: that workdir's CNN made it
        made_by = None if owner is None else owner / BACKBONE_WEIGHTS_FILE
        owned = made_by is not None and made_by.is_file()
        give = str(made_by) if owned else "the weights file that made the cache"
        raise KerasSaatError(
            f"data.feature_cache {directory}: with model.backbone_weights 'shapes' this run "
            "would pre-train a Shapes CNN of its own, whose features are not the cache's; "
            f"set model.backbone_weights to {give}"
        )


def _finished_index(directory):
    """The index of the cache at `directory`, every split finished, or the error."""
    where = f"data.feature_cache {directory}"
    if not (directory / INDEX).is_file():
        inside = directory / FEATURES_DIR  # a workdir named instead of its cache
        hint = f" (a workdir? its cache is {inside})" if (inside / INDEX).is_file() else ""
        raise KerasSaatError(
            f"{where}: no feature cache there (no {INDEX}){hint}; run keras-saat "
            "extract-features for the workdir that owns it first, or set "
            "data.feature_cache to '' to extract into this workdir"
        )
    index = read_index(directory)
    if index.get("version") != VERSION:
        raise KerasSaatError(
            f"{where} has the layout of version {index.get('version')}, this keras-saat "
            f"reads version {VERSION}; extract it again in the workdir that owns it"
        )
    for split in SPLITS:
        entry = index["splits"].get(split)
        if entry is None or todo_shards(directory, entry):
            raise KerasSaatError(
                f"{where} has the {split} split "
                f"{'not extracted' if entry is None else 'unfinished'}; finish it with "
                "keras-saat extract-features for the workdir that owns it"
            )
    return index


def _other_features(index, fingerprint, header):
    """Why a borrowed cache's fingerprint is not this run's, as far as its index says."""
    differ = [f"{key} {index.get(key)} (this run: {value})" for key, value in header.items()
              if index.get(key) != value]  # fmt: skip
    if differ:
        return f"was made with {', '.join(differ)}: give this run those settings"
    stored = index.get("fingerprint")
    if not isinstance(stored, dict) or stored.get("dataset") != fingerprint["dataset"]:
        return (
            "was made from another dataset (other images, splits or order): point "
            "data.path at the owner's dataset (for the Shapes world, its "
            "data/dataset_shapes.json)"
        )
    return (
        "was made by the same backbone with other weights: point model.backbone_weights "
        "at the owner's weights (its backbone.weights.h5 for a pre-trained Shapes CNN) and "
        "keep its model.seed (the seed of a randomly initialised backbone)"
    )
