"""`python -m benchmarks --part scale --images N`: the fixed work of a run at COCO's or CC3M's
shape, on a synthetic dataset of N images.

The shapes: "coco" (5 captions an image, a Zipf vocabulary of 10k words) and "cc3m"
(1 caption, 30k words), captions of 8-14 words, with a captions file (`data.dataset:
captions`; each image an empty file, as the reader only stats it) and a feature cache of
14x14x512 float16 rows for every split. The model is the paper's size (`bench/sizes.py`
"paper": VGG-16's grid, LSTM 1000, the run's vocabulary), untrained. Each phase's wall
time, and the process's peak resident memory once it is done (a running peak: a phase's
own cost is its rise over the phase before):

    read         `read_caption_table` of the captions file
    vocabulary   `build_vocabulary` (the training captions tokenised once)
    fingerprint  the cache's fingerprints: `dataset_fingerprint` (which image sits where)
                 and each train shard's `shard_inputs` (from the reader's stamps: no stat)
    cache_open   `FeatureCache` of the cache folder and its check of every train shard
                 (`check_shard`: its size against the index's, a stat a shard)
    model        the paper-size model built
    resident     the resident-features choice (`data.resident_budget` of the free memory),
                 and the train split's load where it fits
    token_table  the training split's token table (built once a run)
    first_step   the model and its Trainer built, the first batch drawn and the first
                 training step run (XLA compile included)
    epoch        an epoch's fixed work: its dataset with the run's token table, up to the
                 first batch, and the seeded validation subset (`data.val_images`)
    resume       a run resumed 95 % into an epoch: that epoch's dataset from its step
                 (`epoch_dataset(epoch, step)`), up to the first batch
    validation   greedy captions of the validation subset (`data.val_images`)
    evaluate     beam-search captions of the whole test split and their BLEU scores

`startup_seconds` sums the phases up to the first step; `fixed_epoch_seconds` is an
epoch's fixed work plus validation's share (`train.validate_every`).
"""

import resource
import tempfile
import time
from pathlib import Path

from tests.support.synthetic_data import SHAPES, SHARD_SIZE, write_cache, write_captions_file


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _config(shape):
    from keras_saat.config import from_dict

    words = SHAPES[shape]["words"] + 4
    return from_dict({"data": {"vocab_size": words}, "train": {"batch_size": 64}})


def _model(vocabulary):
    from benchmarks.harness.sizes import SIZES, captioner

    return captioner({**SIZES["paper"], "vocab": len(vocabulary)}, "soft")


def _resident(config, cache, model):
    """The resident-features choice and its log line (the train split loaded where it
    fits)."""
    from keras_saat.data.feature_cache.resident_choice import resident_features

    lines = []
    chosen = resident_features(
        config.data, cache, model.compute_dtype, model.distribute_strategy, lines.append
    )
    return chosen, lines[0]


def _first_step(model, resident, epoch_dataset):
    """The Trainer, and one step on the first batch."""
    import keras

    from keras_saat.training.trainer import Trainer

    trainer = Trainer(
        model, keras.optimizers.Adam(1e-4), clipnorm=5.0, log=lambda _: None, resident=resident
    )
    trainer.train_step(next(iter(epoch_dataset(0))))


def measure_scale(shape, images, evaluate=True):
    """Each phase's wall time and the peak RSS after it, at `shape` with `images` images."""
    from keras_saat.data.feature_cache.cache_format import dataset_fingerprint, shard_inputs
    from keras_saat.data.feature_cache.cache_index import shard_records
    from keras_saat.data.feature_cache.feature_cache import FeatureCache
    from keras_saat.data.readers.caption_table import read_caption_table
    from keras_saat.evaluation.bleu import corpus_bleu_scores
    from keras_saat.experiment.epoch_batches import batching, epoch_datasets
    from keras_saat.experiment.preparation import build_vocabulary
    from keras_saat.experiment.scoring import caption_split
    from keras_saat.experiment.training_run import validation_positions

    phases = {}

    def timed(name, work):
        start = time.perf_counter()
        value = work()
        phases[name] = {"seconds": time.perf_counter() - start, "peak_rss_mb": _peak_mb()}
        return value

    config = _config(shape)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = write_captions_file(root, images, shape)
        cache_dir = root / "cache"
        phases["start"] = {"seconds": 0.0, "peak_rss_mb": _peak_mb()}
        dataset = timed("read", lambda: read_caption_table(path))
        vocabulary = timed(
            "vocabulary", lambda: build_vocabulary(config.data, dataset, root, log=lambda _: None)
        )
        train = dataset.split("train")

        def fingerprints():
            dataset_fingerprint(dataset)
            for number in range(-(-len(train) // SHARD_SIZE)):
                shard_inputs(shard_records(train, number, SHARD_SIZE))

        timed("fingerprint", fingerprints)
        write_cache(cache_dir, dataset)
        cache = timed("cache_open", lambda: (c := FeatureCache(cache_dir), c.files("train"))[0])
        model = timed("model", lambda: _model(vocabulary))
        resident, choice = timed("resident", lambda: _resident(config, cache, model))
        batches = batching(config, dataset.split("train"), resident or cache, 1)
        epoch_dataset = epoch_datasets(config, dataset, vocabulary, resident or cache, batches)
        timed("token_table", lambda: epoch_dataset(0))  # the first epoch builds the table
        timed("first_step", lambda: _first_step(model, resident, epoch_dataset))
        val = dataset.split("val")
        positions = validation_positions(len(val), config.data.val_images, 0)

        def epoch():
            next(iter(epoch_dataset(1)))
            validation_positions(len(val), config.data.val_images, 0)

        timed("epoch", epoch)
        # 95 %: a step inside the epoch, whichever way its partial batches go (an epoch
        # holds a few batches more or fewer than `steps`: epoch_batches.py).
        resume_step = batches.steps * 19 // 20
        timed("resume", lambda: next(iter(epoch_dataset(1, resume_step))))
        timed(
            "validation",
            lambda: caption_split(model, cache, "val", val, config, positions=positions),
        )
        if evaluate:
            test = dataset.split("test")

            def score():
                captions = caption_split(
                    model, cache, "test", test, config, beam_size=config.decode.beam_size
                )
                references = [r.captions for p, r in enumerate(test) if p in captions]
                return corpus_bleu_scores(references, [captions[p] for p in sorted(captions)])

            timed("evaluate", score)
    startup = [
        name
        for name in phases
        if name not in ("start", "epoch", "resume", "validation", "evaluate")
    ]
    every = config.train.validate_every
    return {
        "shape": shape,
        "images": images,
        "captions": sum(len(r.captions) for r in dataset.records),
        "vocabulary": len(vocabulary),
        "resident": choice,
        "batching": batches.text,
        "validation_images": len(val) if positions is None else len(positions),
        "resume_step": resume_step,
        "phases": phases,
        "startup_seconds": sum(phases[name]["seconds"] for name in startup),
        "fixed_epoch_seconds": phases["epoch"]["seconds"] + phases["validation"]["seconds"] / every,
    }


def scale_line(row):
    """The log line of one scale row."""
    phases = ", ".join(
        f"{name} {p['seconds']:.2f}s/{p['peak_rss_mb']:.0f} MB"
        for name, p in row["phases"].items()
        if name != "start"
    )
    return (
        f"scale {row['shape']} {row['images']} images ({row['captions']} captions): {phases}; "
        f"start-up {row['startup_seconds']:.1f}s, an epoch's fixed work "
        f"{row['fixed_epoch_seconds']:.1f}s"
    )
