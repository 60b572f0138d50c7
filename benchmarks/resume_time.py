"""Time from a resumed run's start to its first batch, at 95 % of an epoch:
the epoch's dataset from that step (`epoch_dataset(epoch, step)`), or, with code whose
`epoch_dataset` takes only the epoch, the epoch's dataset with the steps before it
skipped (`.skip(step)`, which builds and drops them).

    PYTHONPATH=CHECKOUT python benchmarks/resume_time.py IMAGES BATCHING [SHUFFLE] > row.json

A synthetic COCO-shaped split (5 captions an image, a 14x14x512 float16 feature cache in
shards of 1000 images, `tests.support.synthetic_data`), batch 64, seed 0.
"""

import inspect
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import benchmark_report
from keras_saat.config import from_dict
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.readers.caption_table import read_caption_table
from keras_saat.experiment.epoch_batches import batching, epoch_datasets
from keras_saat.experiment.preparation import build_vocabulary
from tests.support.synthetic_data import write_cache, write_captions_file

images, mode = int(sys.argv[1]), sys.argv[2]
shuffle = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
with tempfile.TemporaryDirectory() as tmp:
    root = Path(tmp)
    dataset = read_caption_table(write_captions_file(root, images, "coco"))
    train = dataset.split("train")
    config = from_dict(
        {
            "data": {"vocab_size": 10_004, "batching": mode, "shuffle_buffer": shuffle},
            "train": {"batch_size": 64},
        }
    )
    vocabulary = build_vocabulary(config.data, dataset, root, log=lambda _: None)
    write_cache(root / "cache", train)
    cache = FeatureCache(root / "cache")
    batches = batching(config, train, cache, 1)
    epoch_dataset = epoch_datasets(config, dataset, vocabulary, cache, batches)
    next(iter(epoch_dataset(0)))  # the token table, built once a run
    planned = "start_step" in inspect.signature(epoch_dataset).parameters
    rows = []
    # The plan drops each window's last partial batch, so an epoch may hold up to ~1 % fewer
    # batches than `steps`: the last row resumes at 95 % of the epoch.
    for step in (0, batches.steps // 2, batches.steps * 19 // 20):
        start = time.perf_counter()
        data = epoch_dataset(1, step) if planned else epoch_dataset(1).skip(step)
        next(iter(data))
        rows.append({"step": step, "seconds": time.perf_counter() - start})
benchmark_report(
    "resume_time.py",
    {
        "images": images,
        "batching": mode,
        "shuffle_buffer": shuffle,
        "steps_per_epoch": batches.steps,
        "resume": "epoch_dataset(epoch, step)" if planned else "epoch_dataset(epoch).skip(step)",
        "first_batch": rows,
    },
)
