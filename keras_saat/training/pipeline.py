"""From a config to a trained, saved and scored model, with Keras `fit()`.

The steps: read (or generate) the dataset, build the vocabulary, pre-train the
Shapes CNN when asked, run the frozen backbone once over every image into the
feature cache (resumable), fit the decoder on caption batches streamed from
the cache, keep the weights with the best validation BLEU-4, save the model,
and score the test split.
"""

import dataclasses
import json
import time
from pathlib import Path

import keras

from keras_saat.config import save_config
from keras_saat.data.coco import read_coco
from keras_saat.data.feature_cache import extract_features
from keras_saat.data.flickr8k import read_flickr8k
from keras_saat.data.images import load_images
from keras_saat.data.karpathy import read_karpathy
from keras_saat.data.pipeline import caption_dataset, evaluation_batches
from keras_saat.data.shapes import write_shapes_dataset
from keras_saat.data.tfds_reader import read_tfds
from keras_saat.encoders.image_encoder import ImageEncoder
from keras_saat.encoders.registry import get_backbone_spec
from keras_saat.errors import KerasSaatError
from keras_saat.evaluation.bleu import corpus_bleu_scores
from keras_saat.models.captioner import build_captioner
from keras_saat.text.vocabulary import Vocabulary

BACKBONE_WEIGHTS_FILE = "backbone.weights.h5"
FEATURES_DIR = "features"


def load_dataset(config, workdir, log=print):
    """Reads the configured dataset (generating the Shapes world when missing) and logs skips."""
    data = config.data
    images_dir = data.images_dir or None
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
        dataset = read_karpathy(path, images_dir, strict=data.strict)
    elif data.dataset == "tfds":
        dataset = read_tfds(
            data.path or "coco_captions", data.tfds_data_dir or None, strict=data.strict
        )
    else:
        if not data.path:
            raise KerasSaatError(
                f"data.path must name the dataset file when data.dataset is {data.dataset}"
            )
        if data.dataset == "karpathy":
            dataset = read_karpathy(data.path, images_dir, strict=data.strict)
        elif data.dataset == "flickr8k":
            dataset = read_flickr8k(data.path, images_dir, strict=data.strict)
        else:
            if not data.val_path:
                raise KerasSaatError(
                    "data.val_path must name captions_val2014.json when data.dataset is coco"
                )
            dataset = read_coco(data.path, data.val_path, images_dir, strict=data.strict)
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


def image_size_of(model_config):
    return model_config.image_size or get_backbone_spec(model_config.backbone).default_image_size


def prepare_backbone_weights(config, dataset, workdir, log=print):
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
        train, val = dataset.split("train"), dataset.split("val")
        size = image_size_of(model)
        log(f"pre-training the Shapes CNN on {len(train)} training scenes (then frozen)")
        start = time.perf_counter()
        backbone, accuracy = pretrain_shapes_cnn(
            load_images([r.path for r in train], size, config.data.resize),
            [r.objects for r in train],
            load_images([r.path for r in val], size, config.data.resize),
            [r.objects for r in val],
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


def extract(config, encoder, dataset, workdir, log=print):
    """Fills <workdir>/features with the encoder's output for every split (resumable)."""
    data = config.data
    log(
        f"feature cache {Path(workdir) / FEATURES_DIR} ({data.cache_dtype}, {data.cache_shard_size} images a shard)"
    )
    start = time.perf_counter()
    cache, _ = extract_features(
        encoder,
        dataset,
        Path(workdir) / FEATURES_DIR,
        shard_size=data.cache_shard_size,
        dtype=data.cache_dtype,
        resize=data.resize,
        strict=data.strict,
        log=log,
    )
    log(f"  features ready in {time.perf_counter() - start:.0f}s")
    return cache


def extract_only(config, workdir, log=print):
    """`keras-saat extract-features`: dataset, backbone weights and cache, no training."""
    get_backbone_spec(config.model.backbone)
    dataset = load_dataset(config, workdir, log)
    model = prepare_backbone_weights(config, dataset, workdir, log)
    # Seeded as build_captioner seeds it, so `train` finds the same encoder and reuses the cache.
    keras.utils.set_random_seed(model.seed)
    encoder = ImageEncoder(model.backbone, model.image_size or None, model.backbone_weights)
    return extract(config, encoder, dataset, workdir, log)


def caption_split(model, source, split, records, config, batch_size=64):
    """Greedy captions of a split's readable images: {position: caption}."""
    batches = evaluation_batches(
        source, split, records, batch_size, image_size=model.image_size, resize=config.data.resize
    )
    captions = {}
    for batch in batches:
        features = batch["features"] if "features" in batch else model.encode(batch["images"])
        out = model.decode(features, config.decode.max_length)
        words = model.ids_to_words(out["tokens"].numpy())
        for position, caption in zip(batch["position"].numpy(), words, strict=True):
            captions[int(position)] = " ".join(caption)
    return captions


def bleu_of(records, captions):
    positions = sorted(captions)
    return corpus_bleu_scores(
        [records[p].references for p in positions], [captions[p].split() for p in positions]
    )


class _BestByBleu(keras.callbacks.Callback):
    """Scores validation BLEU-4 after each epoch, logs progress, keeps the best weights."""

    def __init__(self, score, epochs, log):
        super().__init__()
        self.score, self.epochs, self.log = score, epochs, log
        self.best, self.best_epoch, self.best_weights = -1.0, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.start
        bleu4 = self.score()["bleu_4"]
        if bleu4 > self.best:
            self.best, self.best_epoch = bleu4, epoch + 1
            self.best_weights = self.model.get_weights()
        self.log(
            f"  epoch {epoch + 1}/{self.epochs}: loss {logs['loss']:.3f}, nll/word {logs['nll']:.3f}, "
            f"val BLEU-4 {100 * bleu4:.1f} ({seconds:.0f}s)"
        )


def train(config, workdir, log=print):
    """Trains and scores one experiment; everything is written into `workdir`.

    Writes config.yaml (resolved), vocab.txt, features/ (the cache), model.keras
    (best validation BLEU-4), and eval/test/{predictions.json, metrics.json}.

    Returns:
        dict with the test metrics, captions and records, the best epoch and timings.
    """
    get_backbone_spec(config.model.backbone)  # an unknown name fails before any work
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    save_config(config, workdir / "config.yaml")
    dataset = load_dataset(config, workdir, log)
    splits = {s: dataset.split(s) for s in ("train", "val", "test")}

    vocabulary = Vocabulary.build(
        (c for r in splits["train"] for c in r.references),
        config.data.vocab_size,
        config.data.min_count,
    )
    vocabulary.save(workdir / "vocab.txt")
    log(f"vocabulary: {len(vocabulary)} tokens (4 special) -> {workdir / 'vocab.txt'}")

    model_config = prepare_backbone_weights(config, dataset, workdir, log)
    model = build_captioner(model_config, vocabulary, config.decode.max_length)
    log(
        f"model: {model_config.backbone} grid {model.grid_shape[0]}x{model.grid_shape[1]} "
        f"(L={model.grid_shape[0] * model.grid_shape[1]}, C={model.encoder.feature_channels}), "
        f"{model_config.attention} attention, {model.count_params() - model.encoder.count_params():,} "
        "decoder parameters"
    )
    if model_config.trainable_backbone_layers:
        log(
            "the backbone's top layers train, so batches are decoded from the images (no feature cache)"
        )
        source = "images"
    else:
        source = extract(config, model.encoder, dataset, workdir, log)

    train_config, data = config.train, config.data
    optimizer_class = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop}[
        train_config.optimizer
    ]
    optimizer = optimizer_class(
        learning_rate=train_config.learning_rate, clipnorm=train_config.clipnorm or None
    )
    model.compile(optimizer=optimizer, jit_compile=train_config.jit_compile)
    batches = caption_dataset(
        source,
        "train",
        splits["train"],
        vocabulary,
        data.max_length,
        train_config.batch_size,
        shuffle_buffer=data.shuffle_buffer,
        seed=train_config.seed,
        bucket_by_length=data.bucket_by_length,
        image_size=model.image_size,
        resize=data.resize,
        repeat=True,
    )
    unreadable = {p for p, _ in source.skipped("train")} if source != "images" else set()
    captions_per_epoch = sum(
        len(r.captions) for p, r in enumerate(splits["train"]) if p not in unreadable
    )
    steps = captions_per_epoch // train_config.batch_size
    if steps == 0:
        raise KerasSaatError(
            f"only {captions_per_epoch} training captions for a batch size of {train_config.batch_size}"
        )
    log(
        f"training the decoder for {train_config.epochs} epochs of {steps} steps ({captions_per_epoch} captions)"
    )

    def score_val():
        return bleu_of(splits["val"], caption_split(model, source, "val", splits["val"], config))

    best = _BestByBleu(score_val, train_config.epochs, log)
    start = time.perf_counter()
    model.fit(
        batches,
        epochs=train_config.epochs,
        steps_per_epoch=steps,
        verbose=0,
        shuffle=False,
        callbacks=[best],
    )
    train_seconds = time.perf_counter() - start
    model.set_weights(best.best_weights)
    model.save(workdir / "model.keras")
    log(
        f"best val BLEU-4 {100 * best.best:.1f} at epoch {best.best_epoch}; saved {workdir / 'model.keras'}"
    )

    captions = caption_split(model, source, "test", splits["test"], config)
    metrics = bleu_of(splits["test"], captions)
    records = [splits["test"][p] for p in sorted(captions)]
    ordered = [captions[p] for p in sorted(captions)]
    write_evaluation(
        workdir / "eval" / "test", records, ordered, metrics, "greedy, nltk corpus BLEU"
    )
    return {
        "metrics": metrics,
        "best_epoch": best.best_epoch,
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - started,
        "captions": ordered,
        "records": records,
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
