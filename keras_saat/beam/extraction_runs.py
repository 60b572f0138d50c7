"""`keras-saat extract-features --runner`: the feature cache `extract_features` writes,
its missing shards written by Beam workers; a stopped run's finished shards are kept."""

import json
import re
import shutil
import time
from pathlib import Path

import apache_beam as beam

from keras_saat.beam.extraction import (
    BEAM_DIR,
    DONE_SUFFIX,
    EncoderHandler,
    ExtractFeatures,
    save_encoder_weights,
    write_shard_list,
)
from keras_saat.beam.pipeline_runs import run_pipeline
from keras_saat.data.feature_cache.cache_format import check_format, shard_inputs
from keras_saat.data.feature_cache.cache_index import (
    compact_index,
    finish_shard,
    open_extraction,
    says_todo,
    shard_entry,
    shard_records,
    split_entry,
    todo_shards,
    whole_entry,
)
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.readers.caption_dataset import SPLITS, Skips
from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import sweep_temporaries

_HASH = re.compile(r"[0-9a-f]{32}")  # a `shard_content`


def _finished_record(directory, file):
    """The record a Beam worker left for a shard it wrote, or None where there is none
    whole (a run killed before it, or a record of another shape)."""
    done = directory / BEAM_DIR / (file + DONE_SUFFIX)
    if not (done.is_file() and (directory / file).is_file()):
        return None
    try:
        record = json.loads(done.read_text(encoding="utf-8"))
        skips = Skips()
        for reason, places in record["skips"].items():
            skips.where[reason] += map(str, places)
        content = record.get("content")
        if not (content is None or (isinstance(content, str) and _HASH.fullmatch(content))):
            return None
        return record, skips, record["written"], record["skipped"], record["inputs"], content
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
        return None


def _fold_finished(directory, index, split, numbers, skips, inputs):
    """Records in progress.jsonl the shards among `numbers` a Beam run wrote from the
    images `inputs[number]` names now; returns their numbers."""
    folded = []
    entry = index["splits"][split]
    for number in numbers:
        shard = shard_entry(index, split, number)
        found = _finished_record(directory, shard["file"])
        if found is None or found[4] != inputs[number]:
            continue
        _, shard_skips, written, skipped, _, content = found
        fields = {"done": True, "written": written, "skipped": skipped}
        if not whole_entry(fields, entry["shard_size"], entry["count"]):
            continue  # a record of another shape: the shard is written again
        skips.merge(shard_skips)  # strict: raises before the shard is recorded
        finish_shard(directory, split, number, shard, written, skipped, inputs[number], content)
        folded.append(number)
    return folded


def extract_features_beam(encoder, dataset, directory, splits=SPLITS, shard_size=1000,
                          dtype="float16", batch_size=32, resize="crop", strict=False,
                          compression="none",
                          runner="local", beam_args=(), large_model=False,
                          log=print):  # fmt: skip
    """`extract_features` as a Beam pipeline: the same cache, its shards written by workers.
    Returns (FeatureCache, Skips of the images skipped in this run).

    Args:
        encoder, dataset, directory, splits, shard_size, dtype, batch_size, resize, strict,
            compression: as `extract_features`; the dataset's images must be files the
            workers can read, and `directory` on storage they share.
        runner, beam_args: as `caption_run`.
        large_model: bool. One encoder per machine. Defaults to False.
    """
    check_format(dtype, compression)
    if dataset.image_source is not None:
        raise KerasSaatError(
            f"dataset '{dataset.name}' streams its images (TFDS); --runner reads image files: "
            "extract without --runner"
        )
    import keras

    directory = Path(directory)
    index, fingerprint = open_extraction(directory, encoder, dataset, resize, dtype, compression)
    for folder in (directory, directory / BEAM_DIR):  # a stopped run's temporaries
        if folder.is_dir():
            sweep_temporaries(folder, log)
    skips, todo, total, inputs = Skips(strict), [], 0, {}
    for split in splits:
        records = dataset.split(split)
        entry = split_entry(directory, index, split, records, shard_size, log)
        size = entry["shard_size"]
        inputs[split] = {
            n: shard_inputs(shard_records(records, n, size)) for n in todo_shards(directory, entry)
        }
        # Shards a stopped Beam run finished are recorded first, then kept.
        _fold_finished(directory, index, split, list(inputs[split]), skips, inputs[split])
        numbers = todo_shards(directory, entry)
        if not says_todo(split, entry, numbers, len(records), log):
            continue
        for number in numbers:
            start, stop = number * size, min(len(records), (number + 1) * size)
            images = [(p, records[p]) for p in range(start, stop)]
            file = shard_entry(index, split, number)["file"]
            write_shard_list(directory, split, number, file, images, inputs[split][number])
            todo.append((split, number))
            total += stop - start
    if todo:
        handler = EncoderHandler(
            encoder.backbone_name,
            encoder.image_size,
            save_encoder_weights(encoder, directory, fingerprint["encoder"]),
            dtype,
            resize,
            fingerprint["encoder"],
            policy=keras.config.dtype_policy().name,
            batch_size=batch_size,
            large_model=large_model,
            compression=compression,
        )
        files = [shard_entry(index, s, n)["file"] for s, n in todo]
        log(f"  extract: {len(files)} shards on Beam's {runner} runner")
        start_time = time.perf_counter()
        with run_pipeline(runner, beam_args) as pipeline:
            _ = (
                pipeline
                | "Shards" >> beam.Create(files)
                | "SpreadShards" >> beam.Reshuffle()
                | "Extract"
                >> ExtractFeatures(
                    directory, handler, encoder.image_size, resize, dtype, compression
                )
            )
        seconds = time.perf_counter() - start_time
        for split in {s for s, _ in todo}:
            numbers = [n for s, n in todo if s == split]
            folded = _fold_finished(directory, index, split, numbers, skips, inputs[split])
            if len(folded) < len(numbers):
                raise KerasSaatError(
                    f"{len(numbers) - len(folded)} of {split}'s shards were not written; "
                    f"run the command again to write them"
                )
        log(
            f"  extract: {len(files)} shards in {seconds:.0f}s ({total / max(seconds, 1e-9):.0f} img/s)"
        )
    compact_index(directory, index)
    shutil.rmtree(directory / BEAM_DIR, ignore_errors=True)
    for line in skips.summary():
        log(f"  {line}")
    return FeatureCache(directory), skips
