"""Training one experiment: from a config to a trained, saved and scored model.

`train` reads as the run's table of contents: start the runtime (compile cache, XLA
flags, distribution strategy), check the workdir, read the dataset and build the
vocabulary, build the model (pre-training the Shapes CNN when asked), fill the feature
cache, train the decoder with the GradientTape loop (`keras_saat.training.loop`: XLA,
tf.distribute, checkpoints and exact resume) keeping the best validation BLEU-4, and
score the test split (`keras_saat.experiment.scoring`).
"""

import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_saat.callbacks import CaptionMetrics, TrainingSummaries
from keras_saat.config import load_config, save_config, to_dict
from keras_saat.data.input_pipeline import (
    caption_dataset,
    captions_per_image,
    image_group_count,
    image_group_dataset,
    token_table,
)
from keras_saat.data.resident_features import ResidentFeatures, resident_bytes, resident_dtype
from keras_saat.data.shard_checks import cache_shards, naming_damaged_shards
from keras_saat.encoders.registry import get_backbone_spec
from keras_saat.errors import KerasSaatError
from keras_saat.experiment.preparation import (
    build_vocabulary,
    extract,
    load_dataset,
    prepare_backbone_weights,
)
from keras_saat.experiment.scoring import caption_split, evaluate
from keras_saat.models.factories import build_captioner
from keras_saat.runtime.cpu_kernels import onednn_enabled
from keras_saat.runtime.memory import device_memory
from keras_saat.runtime.precision import dtype_policy, resolve_precision
from keras_saat.runtime.xla import enable_compilation_cache, set_xla_defaults
from keras_saat.training.loop import train_loop
from keras_saat.training.optimization import build_optimizer
from keras_saat.training.trainer import Trainer, is_chief, make_strategy
from keras_saat.workdir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    LOG_DIR,
    MODEL_FILE,
    XLA_CACHE_DIR,
    workdir_lock,
)


def train(config, workdir, log=print, callbacks=()):
    """Trains and scores one experiment with the GradientTape trainer; writes into `workdir`.

    Writes config.yaml (resolved), vocab.txt, features/ (the cache), checkpoints/
    (resume: the same command continues a killed run), logs/ (TensorBoard),
    history.json, model.keras (best validation BLEU-4) and
    eval/test/{predictions.json, metrics.json}.

    Args:
        config: ExperimentConfig.
        workdir: path.
        log: callable for progress lines. Defaults to print.
        callbacks: keras.callbacks.Callback objects, called as `train_loop` says.

    Returns:
        dict with the test metrics and how they were computed, captions and records,
        the best epoch, the training summary and timings.
    """
    Path(workdir).mkdir(parents=True, exist_ok=True)
    with workdir_lock(workdir, "train"):
        return _train(config, Path(workdir), log, callbacks)


def _train(config, workdir, log, callbacks):
    started = time.perf_counter()
    runtime = start_runtime(config.train, workdir)
    get_backbone_spec(config.model.backbone)  # an unknown name fails before any work
    _check_resume_config(config, workdir)
    save_config(config, workdir / CONFIG_FILE)
    dataset = load_dataset(config, workdir, log)
    vocabulary = build_vocabulary(config.data, dataset, workdir, log)
    model = build_model(config, dataset, vocabulary, runtime, workdir, log)
    source = feature_source(config, model, dataset, workdir, log)
    resident = resident_features(config, source, model, runtime, log)
    batches = batching(config, dataset.split("train"), source, runtime["replicas"], resident)
    trainer = build_trainer(
        config.train, model, batches["steps"], runtime, workdir, log, resident=resident
    )
    metrics = validation_metrics(config, dataset, source, workdir, runtime["chief"])
    log(_plan_text(config.train, trainer, batches))
    if runtime["chief"]:
        callbacks = [TrainingSummaries(workdir / LOG_DIR, config.train.log_every), *callbacks]
    with naming_damaged_shards(cache_shards(source, ("train", "val"))):
        result = train_loop(
            trainer,
            epoch_datasets(
                config, dataset, vocabulary, resident or source, batches, model.image_size
            ),
            batches["steps"],
            config.train,
            workdir,
            metrics,
            lambda: _save_model(model, workdir / MODEL_FILE),
            batches["captions_per_batch"],
            chief=runtime["chief"],
            callbacks=callbacks,
        )
    if not runtime["chief"]:
        return {"chief": False, **result}
    log(
        f"best val BLEU-4 {100 * result['best_score']:.1f} at epoch {result['best_epoch']}; "
        f"saved {workdir / MODEL_FILE}"
    )
    # The best model's frozen encoder is the one that filled the cache.
    evaluation = evaluate(workdir, "test", log=log, prepared=(dataset, source))
    return {
        "chief": True,
        "metrics": evaluation["metrics"],
        "method": evaluation["method"],
        "localisation": evaluation["localisation"],
        "beam_size": evaluation["beam_size"],
        "best_epoch": result["best_epoch"],
        "train_seconds": result["train_seconds"],
        "total_seconds": time.perf_counter() - started,
        "training": result,
        "captions": evaluation["captions"],
        "records": evaluation["records"],
    }


def start_runtime(train_config, workdir):
    """The settings TensorFlow reads when it starts, then the distribution strategy.

    Returns a dict: strategy, chief, replicas, precision and cached (the XLA
    compilation cache's directory, None when off).
    """
    # Before any TensorFlow work: TensorFlow reads the cache setting when it starts.
    cached = train_config.compilation_cache and enable_compilation_cache(workdir / XLA_CACHE_DIR)
    set_xla_defaults()  # cuBLAS rather than autotuned Triton GEMMs: a faster compile
    # MultiWorkerMirroredStrategy must exist before any other TensorFlow work.
    strategy = make_strategy(train_config.distribute)
    if train_config.deterministic:
        tf.config.experimental.enable_op_determinism()
    return {
        "strategy": strategy,
        "chief": is_chief(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "precision": resolve_precision(train_config.mixed_precision),
        "cached": cached,
    }


def build_model(config, dataset, vocabulary, runtime, workdir, log=print):
    """The Captioner to train, in the run's precision and under its strategy."""
    train_config = config.train
    model_config = prepare_backbone_weights(config, dataset, workdir, log)
    if model_config.backbone_weights is None and not model_config.trainable_backbone_layers:
        log(
            "warning: the backbone has random weights and is frozen, so attention has no "
            "objects to find; train a recipe (--config shapes_soft) or set "
            "model.backbone_weights to shapes, imagenet or a weights file"
        )
    precision, strategy = runtime["precision"], runtime["strategy"]
    if precision != "float32":
        log(
            f"mixed precision: {precision} compute, float32 variables "
            f"(train.mixed_precision {train_config.mixed_precision})"
        )
    with dtype_policy(precision), strategy.scope():
        model = build_captioner(
            model_config,
            vocabulary,
            config.decode,
            config.data.resize,
            config.export.max_pixels,
        )
    if runtime["replicas"] > 1:
        log(f"distribute {train_config.distribute}: {runtime['replicas']} replicas in sync")
    log(
        f"model: {model_config.backbone} grid {model.grid_shape[0]}x{model.grid_shape[1]} "
        f"(L={model.grid_shape[0] * model.grid_shape[1]}, C={model.encoder.feature_channels}), "
        f"{model_config.attention} attention, {model.count_params() - model.encoder.count_params():,} "
        "decoder parameters"
    )
    return model


def feature_source(config, model, dataset, workdir, log=print):
    """The feature cache, filled by the model's frozen encoder; "images" when the
    backbone trains (batches are then decoded from the image files)."""
    if config.model.trainable_backbone_layers:
        log(
            "the backbone's top layers train, so batches are decoded from the images (no feature cache)"
        )
        return "images"
    return extract(config, model.encoder, dataset, workdir, log)


def resident_features(config, source, model, runtime, log=print):
    """The train split's features in the device's memory (`data.resident_features`), or
    None to stream them from the cache."""
    data = config.data
    setting, budget_share = data.resident_features, data.resident_budget
    if not 0 < budget_share <= 1:
        raise KerasSaatError(f"data.resident_budget {budget_share}: expected a share in (0, 1]")
    if setting is False:
        return None
    if source == "images":
        if setting is True:
            raise KerasSaatError(
                "data.resident_features true needs the feature cache, and the backbone trains "
                "(model.trainable_backbone_layers), so batches are decoded images: set "
                "data.resident_features auto or false"
            )
        return None
    dtype = resident_dtype(source.index["dtype"], model.compute_dtype)
    need = resident_bytes(source, "train", dtype)
    device, total, free = device_memory()
    budget = budget_share * free
    sizes = (
        f"{need / 2**30:.2f} GiB of the {budget / 2**30:.1f} GiB budget "
        f"({budget_share} of the {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB "
        f"on {device})"
    )
    if need > budget:
        if setting is True:
            raise KerasSaatError(
                f"data.resident_features true: the train split's features need {sizes}; "
                "raise data.resident_budget, or set data.resident_features auto or false "
                "(stream them from the cache)"
            )
        log(f"features streamed from the cache: the train split would take {sizes}")
        return None
    started = time.perf_counter()
    resident = ResidentFeatures(source, "train", dtype, runtime["strategy"])
    log(
        f"features resident on {device}: {resident.count} images x {source.num_locations}x"
        f"{source.channels} {dtype.name}, {sizes}; loaded in {time.perf_counter() - started:.1f}s"
    )
    return resident


def build_trainer(train_config, model, steps, runtime, workdir, log=print, resident=None):
    """The optimizer (its schedule over `steps` a epoch) and the GradientTape Trainer."""
    with dtype_policy(runtime["precision"]), runtime["strategy"].scope():
        optimizer = build_optimizer(train_config, steps)
    trainer = Trainer(
        model,
        optimizer,
        runtime["strategy"],
        train_config.clipnorm,
        train_config.jit_compile,
        log,
        unroll=train_config.unroll,
        resident=resident,
    )
    if trainer.jit_compile and train_config.compilation_cache:
        log(
            f"XLA compilation cache: {runtime['cached']} (a resumed or repeated run "
            "loads the compiled steps)"
            if runtime["cached"]
            else "XLA compilation cache off: TensorFlow was running before train() (set "
            "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR before the first op)"
        )
    return trainer


def epoch_datasets(config, dataset, vocabulary, source, batches, image_size):
    """`(epoch, start_step) -> tf.data.Dataset` of an epoch's training batches from batch
    `start_step` on; each epoch's order is fixed by the seed and the epoch, so a resumed
    run starts at the batch it stopped at, without producing those before it. The
    captions are tokenised into the token table once, for every epoch."""
    data, train_config = config.data, config.train
    records = dataset.split("train")
    tokens = []  # the token table, built at the first epoch

    def epoch_dataset(epoch, start_step=0):
        seed = train_config.seed * 1009 + epoch
        if not tokens:
            tokens.append(token_table(records, vocabulary, data.max_length))
        if batches["mode"] == "per_image":
            return image_group_dataset(
                source,
                "train",
                records,
                vocabulary,
                data.max_length,
                batches["images_per_batch"],
                batches["per_image"],
                shuffle_buffer=max(data.shuffle_buffer // batches["per_image"], 1),
                seed=seed,
                image_size=image_size,
                resize=data.resize,
                tokens_of=tokens[0],
                start_step=start_step,
            )
        return caption_dataset(
            source,
            "train",
            records,
            vocabulary,
            data.max_length,
            train_config.batch_size,
            shuffle_buffer=data.shuffle_buffer,
            seed=seed,
            bucket_by_length=data.bucket_by_length,
            image_size=image_size,
            resize=data.resize,
            tokens_of=tokens[0],
            start_step=start_step,
        )

    return epoch_dataset


def validation_metrics(config, dataset, source, workdir, chief):
    """The validation callback `fit()` users have (`CaptionMetrics`), reading the cache:
    `data.val_images` of the val split every `train.validate_every` epochs."""
    records = dataset.split("val")
    positions = validation_positions(len(records), config.data.val_images, config.train.seed)
    chosen = records if positions is None else [records[p] for p in positions]

    def caption_fn(model):
        captions = caption_split(model, source, "val", records, config, positions=positions)
        if positions is None:
            return captions
        # CaptionMetrics indexes its own (subset) records.
        return {i: captions[p] for i, p in enumerate(positions) if p in captions}

    return CaptionMetrics(
        chosen,
        every=config.train.validate_every,
        log_dir=workdir / LOG_DIR if chief else None,
        images=config.train.summary_images,
        caption_fn=caption_fn,
    )


def validation_positions(count, cap, seed):
    """The sorted positions of the per-epoch validation subset: `cap` of `count` images
    drawn with `seed` (the same every epoch and on resume), or None for all of them."""
    if cap is None or cap >= count:
        return None
    chosen = np.random.default_rng(seed).choice(count, size=int(cap), replace=False)
    return sorted(int(p) for p in chosen)


def _plan_text(train_config, trainer, batches):
    return (
        f"training: {train_config.epochs} epochs of {batches['steps']} steps "
        f"({batches['captions']} captions, {batches['text']}), {train_config.optimizer}, "
        f"{'XLA' if trainer.jit_compile else 'no XLA'}"
        f"{' (jit_compile: auto)' if train_config.jit_compile == 'auto' else ''}, "
        f"teacher forcing {'unrolled' if trainer.unroll else 'in one tf.while_loop'}"
        f"{_cpu_kernels_text()}"
    )


def _cpu_kernels_text():
    """The training line's note on the CPU kernels (oneDNN's or TensorFlow's own), where
    no GPU trains."""
    if tf.config.list_physical_devices("GPU"):
        return ""
    return ", oneDNN CPU kernels" if onednn_enabled() else ", TensorFlow's own CPU kernels"


def batching_mode(data, source, resident=None):
    """`data.batching` with "auto" resolved: per_image where the features stream from the
    cache (each image's features read and shuffled once, not once per caption), else
    per_caption."""
    if data.batching != "auto":
        return data.batching
    streamed = resident is None and source != "images"
    return "per_image" if streamed and not data.bucket_by_length else "per_caption"


def batching(config, records, source, replicas, resident=None):
    """Steps per epoch and batch shape of `data.batching` (the train split's `records`;
    images the cache could not read are left out; `resident` the ResidentFeatures the run
    holds, or None where the features stream). The steps count full batches of the
    whole split; an epoch's plan cuts batches window by window (`data.epoch_order`), so
    it may hold a few fewer (up to batch_size - 1 captions a window are left for the
    epoch: about 1 % at the default shuffle_buffer and batch 64)."""
    batch_size, data = config.train.batch_size, config.data
    unreadable = {p for p, _ in source.skipped("train")} if source != "images" else set()
    captions = sum(len(r.captions) for p, r in enumerate(records) if p not in unreadable)
    mode = batching_mode(data, source, resident)
    if mode == "per_image":
        if data.bucket_by_length:
            raise KerasSaatError(
                "data.bucket_by_length batches captions by length, which per-image batches "
                "cannot: set data.batching per_caption or data.bucket_by_length false"
            )
        per_image = captions_per_image(records)
        images_per_batch = max(batch_size // per_image, 1)
        groups = image_group_count(records, per_image, unreadable)
        result = {
            "mode": "per_image",
            "steps": groups // images_per_batch,
            "per_image": per_image,
            "images_per_batch": images_per_batch,
            "captions_per_batch": images_per_batch * per_image,
            "text": f"per-image batches of {images_per_batch} images x {per_image} captions",
            "units": images_per_batch,
            "captions": captions,
        }
    else:
        result = {
            "mode": "per_caption",
            "steps": captions // batch_size,
            "captions_per_batch": batch_size,
            "text": f"batch {batch_size}",
            "units": batch_size,
            "captions": captions,
        }
    if data.batching == "auto" and mode == "per_image":
        result["text"] += " (data.batching auto: the features stream from the cache)"
    if result["steps"] == 0:
        raise KerasSaatError(
            f"only {captions} training captions for a batch size of {batch_size} ({result['text']})"
        )
    if result["units"] % replicas:
        raise KerasSaatError(
            f"train.batch_size {batch_size} ({result['text']}) does not split evenly over "
            f"{replicas} replicas"
        )
    return result


def _save_model(model, path):
    """Writes the model as .keras atomically (a killed run never leaves half a file), in
    float32 whatever precision it trained in, so the file loads and computes anywhere."""
    tmp = path.with_name(f".{path.stem}.tmp.keras")
    if model.precision != "float32":
        model = model.with_precision("float32")
    model.save(tmp)
    os.replace(tmp, path)


def _check_resume_config(config, workdir):
    """A workdir with checkpoints resumes only the same experiment (epochs may change)."""
    saved = workdir / CONFIG_FILE
    if not (workdir / CHECKPOINT_DIR).exists() or not saved.exists():
        return
    previous = load_config(saved)
    # What a resumed run may change: how it computes (the same batches and weights
    # either way) and how long it runs, not what it trains.
    keep = {
        "train": {
            "jit_compile",  # how the step is compiled
            "unroll",  # the same values, unrolled or in a loop
            "epochs",
            "patience",
            "log_every",
            "summary_images",
            "validate_every",
            "checkpoint_every",
            "max_checkpoints",
        },
        "data": {"resident_features", "resident_budget"},  # where the features are held
    }

    def compared(values):
        # Decoding and export settings do not touch the trained weights.
        values = {**values, "decode": None, "export": None}
        for section, keys in keep.items():
            values[section] = {k: v for k, v in values[section].items() if k not in keys}
        return values

    mine, theirs = compared(to_dict(config)), compared(to_dict(previous))
    if mine != theirs:
        changed = [
            f"{section}.{key}"
            for section in theirs
            if isinstance(theirs[section], dict)
            for key in theirs[section]
            if theirs[section][key] != mine[section][key]
        ]
        raise KerasSaatError(
            f"{workdir} holds checkpoints of another config (changed: {', '.join(changed) or 'name'}); "
            "use a new --workdir, or delete its checkpoints folder to start again"
        )
