"""From a config to a trained, saved and scored model, with Keras `fit()`.

The steps: make or read the dataset, build the vocabulary, pre-train the
Shapes CNN when asked, run the frozen backbone once over every image, fit the
decoder on the cached features, keep the weights with the best validation
BLEU-4, save the model, and score the test split.
"""

import dataclasses
import json
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_saat.config import save_config
from keras_saat.data.images import load_images
from keras_saat.data.karpathy import read_karpathy
from keras_saat.data.shapes import write_shapes_dataset
from keras_saat.encoders.registry import get_backbone_spec
from keras_saat.errors import KerasSaatError
from keras_saat.evaluation.bleu import corpus_bleu_scores
from keras_saat.models.captioner import build_captioner
from keras_saat.text.vocabulary import Vocabulary

BACKBONE_WEIGHTS_FILE = "backbone.weights.h5"


def resolve_dataset(config, workdir, log=print):
    """Reads the configured dataset; generates the Shapes world first when it is missing."""
    data = config.data
    if data.dataset == "shapes":
        path = Path(data.path) if data.path else Path(workdir) / "data" / "dataset_shapes.json"
        if not path.exists():
            log(
                f"generating the Shapes world in {path.parent} "
                f"({data.shapes_train}/{data.shapes_val}/{data.shapes_test} images, seed {data.shapes_seed})"
            )
            write_shapes_dataset(
                path.parent,
                data.shapes_train,
                data.shapes_val,
                data.shapes_test,
                data.shapes_seed,
                log,
            )
    else:
        if not data.path:
            raise KerasSaatError(
                "data.path must name a Karpathy split JSON file when data.dataset is karpathy"
            )
        path = Path(data.path)
    dataset = read_karpathy(path, data.images_dir or None)
    for split, count in dataset.counts().items():
        if count == 0:
            raise KerasSaatError(
                f"dataset {path} has no '{split}' images; train, val and test are all needed"
            )
    return dataset


def image_size_of(model_config):
    return model_config.image_size or get_backbone_spec(model_config.backbone).default_image_size


def prepare_backbone_weights(config, pixels, dataset, workdir, log=print):
    """Returns the ModelConfig to build with; pre-trains the Shapes CNN for backbone_weights 'shapes'."""
    model = config.model
    if model.backbone_weights != "shapes":
        return model
    if model.backbone != "shapes_cnn":
        raise KerasSaatError(
            "backbone_weights 'shapes' (attribute pre-training) needs backbone shapes_cnn"
        )
    path = Path(workdir) / BACKBONE_WEIGHTS_FILE
    if path.exists():
        log(f"using the pre-trained Shapes CNN in {path}")
    else:
        from keras_saat.encoders.shapes_cnn import pretrain_shapes_cnn

        if any(r.objects is None for r in dataset.records):
            raise KerasSaatError(
                "backbone_weights 'shapes' needs a Shapes dataset (with 'objects' per image)"
            )
        log(f"pre-training the Shapes CNN on {len(pixels['train'])} training scenes (then frozen)")
        start = time.perf_counter()
        backbone, accuracy = pretrain_shapes_cnn(
            pixels["train"],
            [r.objects for r in dataset.split("train")],
            pixels["val"],
            [r.objects for r in dataset.split("val")],
            epochs=config.train.backbone_pretrain_epochs,
            seed=model.seed,
            log=log,
        )
        backbone.save_weights(str(path))
        scores = ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items())
        log(
            f"  done in {time.perf_counter() - start:.0f}s; val accuracy on object locations: {scores}"
        )
    return dataclasses.replace(model, backbone_weights=str(path))


def extract_features(model, pixels, batch_size=64):
    """Runs the frozen encoder once: (N, S, S, 3) uint8 -> (N, L, C) float32."""
    encode = tf.function(model.encode, jit_compile=True)
    chunks = [
        encode(tf.convert_to_tensor(pixels[i : i + batch_size], tf.float32)).numpy()
        for i in range(0, len(pixels), batch_size)
    ]
    return np.concatenate(chunks)


def caption_pairs(records, vocabulary, max_length):
    """Every (image index, caption ids) pair of a split: the paper trains on all references."""
    index, captions = [], []
    for i, record in enumerate(records):
        for caption in record.captions:
            if caption:
                index.append(i)
                captions.append(caption)
    return np.asarray(index, np.int32), vocabulary.encode_batch(captions, max_length)


def training_dataset(features, records, vocabulary, max_length, batch_size, seed):
    """tf.data of {features, tokens} batches over every caption, reshuffled each epoch."""
    index, tokens = caption_pairs(records, vocabulary, max_length)
    if len(index) < batch_size:
        raise KerasSaatError(
            f"only {len(index)} training captions for a batch size of {batch_size}"
        )
    table = tf.constant(features)
    ds = tf.data.Dataset.from_tensor_slices((index, tokens))
    ds = ds.shuffle(len(index), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=True)  # static shapes for XLA
    ds = ds.map(
        lambda i, t: {"features": tf.gather(table, i), "tokens": t},
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def score_split(model, features, records, max_length, batch_size=64):
    """Greedy captions for a split and their corpus BLEU against all references."""
    captions = model.generate(features=features, max_length=max_length, batch_size=batch_size)
    metrics = corpus_bleu_scores([r.captions for r in records], [c.split() for c in captions])
    return captions, metrics


class _BestByBleu(keras.callbacks.Callback):
    """Scores validation BLEU-4 after each epoch, logs progress, keeps the best weights."""

    def __init__(self, features, records, max_length, epochs, log):
        super().__init__()
        self.features, self.records, self.max_length = features, records, max_length
        self.epochs, self.log = epochs, log
        self.best, self.best_epoch, self.best_weights = -1.0, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.start
        _, metrics = score_split(self.model, self.features, self.records, self.max_length)
        bleu4 = metrics["bleu_4"]
        if bleu4 > self.best:
            self.best, self.best_epoch = bleu4, epoch + 1
            self.best_weights = self.model.get_weights()
        self.log(
            f"  epoch {epoch + 1}/{self.epochs}: loss {logs['loss']:.3f}, nll/word {logs['nll']:.3f}, "
            f"val BLEU-4 {100 * bleu4:.1f} ({seconds:.0f}s)"
        )


def train(config, workdir, log=print):
    """Trains and scores one experiment; everything is written into `workdir`.

    Writes config.yaml (resolved), vocab.txt, model.keras (best validation
    BLEU-4), and eval/test/{predictions.json, metrics.json}.

    Returns:
        dict with the test metrics, the best epoch and timings.
    """
    get_backbone_spec(config.model.backbone)  # an unknown name fails before any work
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    save_config(config, workdir / "config.yaml")
    dataset = resolve_dataset(config, workdir, log)
    splits = {s: dataset.split(s) for s in ("train", "val", "test")}
    counts = ", ".join(f"{len(v)} {k}" for k, v in splits.items())
    log(f"dataset '{dataset.name}': {counts} images")

    vocabulary = Vocabulary.build(
        (c for r in splits["train"] for c in r.captions),
        config.data.vocab_size,
        config.data.min_count,
    )
    vocabulary.save(workdir / "vocab.txt")
    log(f"vocabulary: {len(vocabulary)} tokens (4 special) -> {workdir / 'vocab.txt'}")

    size = image_size_of(config.model)
    log(f"reading images at {size}x{size}")
    pixels = {s: load_images([r.path for r in v], size) for s, v in splits.items()}
    model_config = prepare_backbone_weights(config, pixels, dataset, workdir, log)
    model = build_captioner(model_config, vocabulary, config.decode.max_length)
    log(
        f"model: {model_config.backbone} grid {model.grid_shape[0]}x{model.grid_shape[1]} "
        f"(L={model.grid_shape[0] * model.grid_shape[1]}, C={model.encoder.feature_channels}), "
        f"{model_config.attention} attention, {model.count_params() - model.encoder.count_params():,} "
        "decoder parameters"
    )
    start = time.perf_counter()
    features = {s: extract_features(model, p) for s, p in pixels.items()}
    log(
        f"backbone features for {sum(len(p) for p in pixels.values())} images in {time.perf_counter() - start:.0f}s"
    )

    train_config = config.train
    optimizer_class = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop}[
        train_config.optimizer
    ]
    optimizer = optimizer_class(
        learning_rate=train_config.learning_rate, clipnorm=train_config.clipnorm or None
    )
    model.compile(optimizer=optimizer, jit_compile=train_config.jit_compile)
    data = training_dataset(
        features["train"],
        splits["train"],
        vocabulary,
        config.data.max_length,
        train_config.batch_size,
        train_config.seed,
    )
    log(f"training the decoder for {train_config.epochs} epochs")
    best = _BestByBleu(
        features["val"], splits["val"], config.decode.max_length, train_config.epochs, log
    )
    start = time.perf_counter()
    model.fit(data, epochs=train_config.epochs, verbose=0, shuffle=False, callbacks=[best])
    train_seconds = time.perf_counter() - start
    model.set_weights(best.best_weights)
    model.save(workdir / "model.keras")
    log(
        f"best val BLEU-4 {100 * best.best:.1f} at epoch {best.best_epoch}; saved {workdir / 'model.keras'}"
    )

    captions, metrics = score_split(
        model, features["test"], splits["test"], config.decode.max_length
    )
    write_evaluation(
        workdir / "eval" / "test", splits["test"], captions, metrics, "greedy, nltk corpus BLEU"
    )
    return {
        "metrics": metrics,
        "best_epoch": best.best_epoch,
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - started,
        "captions": captions,
        "records": splits["test"],
    }


def write_evaluation(out_dir, records, captions, metrics, method):
    """predictions.json (COCO results format) and metrics.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions = [
        {"image_id": r.imgid, "caption": c} for r, c in zip(records, captions, strict=True)
    ]
    (out_dir / "predictions.json").write_text(json.dumps(predictions, indent=1))
    payload = {"scale": "0-1", "method": method, "images": len(records), **metrics}
    (out_dir / "metrics.json").write_text(json.dumps(payload, indent=1))
