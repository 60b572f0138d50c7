"""Training one experiment: from a config to a trained, saved and scored model; `_train`
reads as the run's table of contents."""

import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_saat.callbacks import CaptionMetrics, TrainingSummaries
from keras_saat.config import save_config
from keras_saat.data.feature_cache.resident_choice import resident_features
from keras_saat.data.feature_cache.shard_checks import naming_damaged_shards
from keras_saat.data.pipeline.image_file_source import ImageFiles
from keras_saat.encoders.registry import get_backbone_spec
from keras_saat.experiment.epoch_batches import batching, epoch_datasets
from keras_saat.experiment.preparation import (
    build_vocabulary,
    check_feature_cache,
    extract,
    load_dataset,
    prepare_backbone_weights,
)
from keras_saat.experiment.resume_check import check_resume_config
from keras_saat.experiment.run_context import start_runtime
from keras_saat.experiment.scoring import caption_split, evaluate
from keras_saat.experiment.workdir_familiarity import calibrate_workdir
from keras_saat.io_utils import atomic_path
from keras_saat.models.factories import build_captioner
from keras_saat.runtime.cpu_kernels import onednn_enabled
from keras_saat.runtime.precision import dtype_policy
from keras_saat.training.loop import train_loop
from keras_saat.training.optimization import build_optimizer
from keras_saat.training.trainer import Trainer
from keras_saat.workdir import CONFIG_FILE, LOG_DIR, MODEL_FILE, workdir_lock


def train(config, workdir, log=print, callbacks=()):
    """Trains and scores one experiment with the GradientTape trainer; writes into `workdir`.

    Writes config.yaml, vocab.txt, features/, checkpoints/ (the same command resumes a
    killed run), logs/ (TensorBoard), history.json, model.keras (best validation BLEU-4)
    and eval/test/.

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
    check_resume_config(config, workdir)
    check_feature_cache(config, workdir)  # before the data is rendered or a CNN pre-trained
    # The dataset first: a world the workdir's trained model refuses to see redrawn
    # leaves its config.yaml as it was.
    dataset = load_dataset(config, workdir, log, redraw=True)
    save_config(config, workdir / CONFIG_FILE)
    vocabulary = build_vocabulary(config.data, dataset, workdir, log)
    model = build_model(config, dataset, vocabulary, runtime, workdir, log)
    source = feature_source(config, model, dataset, workdir, log)
    resident = resident_features(config.data, source, model.compute_dtype, runtime.strategy, log)
    epochs_read = resident or source  # what the epochs' batches come from
    batches = batching(config, dataset.split("train"), epochs_read, runtime.replicas)
    trainer = build_trainer(
        config.train, model, batches.steps, runtime, workdir, log, resident=resident
    )
    metrics = validation_metrics(config, dataset, source, workdir, runtime.chief)
    log(_plan_text(config.train, trainer, batches))
    if runtime.chief:
        callbacks = [TrainingSummaries(workdir / LOG_DIR, config.train.log_every), *callbacks]
    with naming_damaged_shards(source.shard_files(("train", "val"))):
        result = train_loop(
            trainer,
            epoch_datasets(config, dataset, vocabulary, epochs_read, batches),
            batches.steps,
            config.train,
            workdir,
            metrics,
            lambda: _save_model(model, workdir / MODEL_FILE),
            batches.captions_per_batch,
            chief=runtime.chief,
            callbacks=callbacks,
        )
    if not runtime.chief:
        return {"chief": False, **result}
    log(
        f"best val BLEU-4 {result['best_score']:.3f} at epoch {result['best_epoch']}; "
        f"saved {workdir / MODEL_FILE}"
    )
    # The best model's frozen encoder is the one that filled the cache.
    calibrate_workdir(workdir, config, log, prepared=(dataset, source))
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


def build_model(config, dataset, vocabulary, runtime, workdir, log=print):
    """The Captioner to train, in the run's precision and under its strategy."""
    model_config = prepare_backbone_weights(config, dataset, workdir, log)
    if model_config.backbone_weights is None and not model_config.trainable_backbone_layers:
        log(
            "warning: the backbone has random weights and is frozen, so attention has no "
            "objects to find; train a recipe (--config shapes_soft) or set "
            "model.backbone_weights to shapes, imagenet or a weights file"
        )
    if runtime.precision != "float32":
        log(
            f"mixed precision: {runtime.precision} compute, float32 variables "
            f"(train.mixed_precision {config.train.mixed_precision})"
        )
    with dtype_policy(runtime.precision), runtime.strategy.scope():
        model = build_captioner(
            model_config,
            vocabulary,
            config.decode,
            config.data.resize,
            config.export.max_pixels,
        )
    if runtime.replicas > 1:
        log(f"distribute {config.train.distribute}: {runtime.replicas} replicas in sync")
    # The decoder's own: neither the backbone nor the familiarity statistics (not learnt).
    decoder = model.count_params() - model.encoder.count_params() - model.familiarity.count_params()
    log(
        f"model: {model_config.backbone} grid {model.grid_shape[0]}x{model.grid_shape[1]} "
        f"(L={model.grid_shape[0] * model.grid_shape[1]}, C={model.encoder.feature_channels}), "
        f"{model_config.attention} attention, {decoder:,} decoder parameters"
    )
    return model


def feature_source(config, model, dataset, workdir, log=print):
    """The feature cache, filled by the model's frozen encoder; the image files when the
    backbone trains (batches are then decoded from them)."""
    if config.model.trainable_backbone_layers:
        log(
            "the backbone's top layers train, so batches are decoded from the images (no feature cache)"
        )
        return ImageFiles(model.image_size, config.data.resize)
    return extract(config, model.encoder, dataset, workdir, log, lock_as=None)  # train's lock


def build_trainer(train_config, model, steps, runtime, workdir, log=print, resident=None):
    """The optimizer (its schedule over `steps` a epoch) and the GradientTape Trainer."""
    with dtype_policy(runtime.precision), runtime.strategy.scope():
        optimizer = build_optimizer(train_config, steps)
    trainer = Trainer(
        model,
        optimizer,
        runtime.strategy,
        train_config.clipnorm,
        train_config.jit_compile,
        log,
        unroll=train_config.unroll,
        resident=resident,
        fused_scores=None if train_config.fused_scores == "auto" else train_config.fused_scores,
    )
    if trainer.jit_compile and train_config.compilation_cache:
        log(
            f"XLA compilation cache: {runtime.cached} (a resumed or repeated run "
            "loads the compiled steps)"
            if runtime.cached
            else "XLA compilation cache off: TensorFlow was running before train() (set "
            "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR before the first op)"
        )
    return trainer


def validation_metrics(config, dataset, source, workdir, chief):
    """The validation callback `fit()` users have (`CaptionMetrics`), reading the cache:
    `data.val_images` of the val split every `train.validate_every` epochs."""
    records = dataset.split("val")
    positions = validation_positions(len(records), config.data.val_images, config.train.seed)

    def caption_fn(model):
        captions = caption_split(model, source, "val", records, config, positions=positions)
        if positions is None:
            return captions
        # CaptionMetrics indexes its own (subset) records.
        return {i: captions[p] for i, p in enumerate(positions) if p in captions}

    return CaptionMetrics(
        records if positions is None else [records[p] for p in positions],
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
        f"training: {train_config.epochs} epochs of {batches.steps} steps "
        f"({batches.captions} captions, {batches.text}), {train_config.optimizer}, "
        f"{'XLA' if trainer.jit_compile else 'no XLA'}"
        f"{' (jit_compile: auto)' if train_config.jit_compile == 'auto' else ''}, "
        f"teacher forcing {'unrolled' if trainer.unroll else 'in one tf.while_loop'}"
        f"{', attention scores fused' if trainer.fused_scores else ''}"
        f"{_cpu_kernels_text()}"
    )


def _cpu_kernels_text():
    """The training line's note on the CPU kernels, where no GPU trains."""
    if tf.config.list_physical_devices("GPU"):
        return ""
    return ", oneDNN CPU kernels" if onednn_enabled() else ", TensorFlow's own CPU kernels"


def _save_model(model, path):
    """Writes the model as .keras atomically (a killed run never leaves half a file), in
    float32 whatever precision it trained in, so the file loads and computes anywhere."""
    if model.precision != "float32":
        model = model.with_precision("float32")
    with atomic_path(path, suffix=".keras") as tmp:
        model.save(tmp)
