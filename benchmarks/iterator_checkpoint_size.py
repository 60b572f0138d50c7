"""The size of a tf.data iterator checkpoint (`tf.train.Checkpoint(iterator=...)`) of a
caption pipeline that shuffles features in a buffer, after its first batch: what saving
the input position as iterator state would add to every checkpoint.

    PYTHONPATH=CHECKOUT python benchmarks/iterator_checkpoint_size.py IMAGES [SHUFFLE] > row.json

CHECKOUT is a keras-saat whose caption pipeline (`caption_batches`) shuffles (image, caption) examples in a
buffer of SHUFFLE captions (default 5000); COCO-shaped synthetic data
(`tests.support.synthetic_data`: 5 captions an image, 14x14x512 float16 features), batch 64.
"""

import sys
import tempfile
from pathlib import Path

import tensorflow as tf

from benchmarks.harness import benchmark_report
from keras_saat.config import from_dict
from keras_saat.data.feature_cache.feature_cache import FeatureCache
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.input_pipeline import caption_batches, token_table
from keras_saat.data.readers.caption_table import read_caption_table
from keras_saat.experiment.preparation import build_vocabulary
from tests.support.synthetic_data import write_cache, write_captions_file

images = int(sys.argv[1])
shuffle = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
with tempfile.TemporaryDirectory() as tmp:
    root = Path(tmp)
    dataset = read_caption_table(write_captions_file(root, images, "coco"))
    train = dataset.split("train")
    config = from_dict({"data": {"vocab_size": 10_004}})
    vocabulary = build_vocabulary(config.data, dataset, root, log=lambda _: None)
    write_cache(root / "cache", train)
    data = caption_batches(
        FeatureCache(root / "cache"), "train", train, token_table(train, vocabulary, 20),
        BatchPlan(64, shuffle_buffer=shuffle, seed=0),
    )  # fmt: skip
    iterator = iter(data)
    next(iterator)
    prefix = tf.train.Checkpoint(iterator=iterator).write(str(root / "ckpt" / "it"))
    size = sum(p.stat().st_size for p in (root / "ckpt").iterdir())
benchmark_report(
    "iterator_checkpoint_size.py",
    {
        "images": images,
        "shuffle_buffer": shuffle,
        "iterator_checkpoint_bytes": size,
    },
)
