"""The command-line trainer: GradientTape steps with XLA, any tf.distribute strategy, exact resume.

One step:
    per replica (compiled with XLA):  forward, `caption_loss` (the function `fit()` uses),
                                      gradients of the replica's share of the global mean
    across replicas:                  sum the gradients and loss terms (strategy.reduce)
    then, once:                       skip the update if the loss or gradient norm is not
                                      finite; otherwise clip to the global norm and apply;
                                      a REINFORCE attention moves its baseline

Resume: a `tf.train.Checkpoint` holds every model variable (the random seed
states of dropout and the hard-attention sampler included, and the REINFORCE
baseline), the optimiser, and the run's progress (global step, epoch, step in
the epoch, best validation score, patience count). The data order of an
epoch is a function of the seed and the epoch number, so the iterator position
is the (epoch, step) pair: a resumed run rebuilds that epoch's stream and
skips the batches already trained on. With `deterministic` on, a run killed
at any point and restarted with the same command ends with the same weights
as an uninterrupted one.
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import write_json_atomic
from keras_saat.precision import dtype_policy, resolve_precision  # noqa: F401 (re-exported)
from keras_saat.text.vocabulary import PAD_ID
from keras_saat.workdir import CHECKPOINT_DIR, HISTORY_FILE

_PROGRESS = ("global_step", "epoch", "step_in_epoch", "best_epoch", "bad_epochs", "finished")


def make_strategy(name="default"):
    """A tf.distribute strategy by config name: "default", "mirrored" or "multi_worker".

    MultiWorkerMirroredStrategy reads the cluster from the TF_CONFIG environment
    variable and must be created before any other TensorFlow work in the process.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        cpus = tf.config.list_logical_devices("CPU")
        devices = [d.name for d in (gpus or cpus)]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise KerasSaatError(
                "train.distribute multi_worker needs the TF_CONFIG environment variable "
                '(cluster and task, e.g. {"cluster": {"worker": ["host1:port", "host2:port"]}, '
                '"task": {"type": "worker", "index": 0}})'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise KerasSaatError(f"unknown distribute strategy {name!r}: default, mirrored or multi_worker")


def is_chief(strategy):
    """True on the worker that writes checkpoints, the best model and summaries."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


@keras.saving.register_keras_serializable(package="keras_saat")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then constant, cosine or per-epoch exponential decay.

    Args:
        learning_rate: float. Peak learning rate.
        kind: str. "constant", "cosine" or "exponential".
        total_steps: int. Steps in the run (cosine decays over them).
        steps_per_epoch: int. Steps per epoch (exponential decays once an epoch).
        warmup_steps: int. Linear warm-up steps. Defaults to 0.
        final_fraction: float. Cosine: the last rate as a fraction of the peak. Defaults to 0.1.
        decay_rate: float. Exponential: the factor per epoch. Defaults to 0.9.
    """

    def __init__(
        self,
        learning_rate,
        kind,
        total_steps,
        steps_per_epoch,
        warmup_steps=0,
        final_fraction=0.1,
        decay_rate=0.9,
    ):
        self.learning_rate = float(learning_rate)
        self.kind = kind
        self.total_steps = max(int(total_steps), 1)
        self.steps_per_epoch = max(int(steps_per_epoch), 1)
        self.warmup_steps = int(warmup_steps)
        self.final_fraction = float(final_fraction)
        self.decay_rate = float(decay_rate)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        rate = tf.constant(self.learning_rate, tf.float32)
        if self.kind == "cosine":
            progress = tf.minimum(step / self.total_steps, 1.0)
            cosine = 0.5 * (1.0 + tf.cos(np.pi * progress))
            rate = rate * (self.final_fraction + (1.0 - self.final_fraction) * cosine)
        elif self.kind == "exponential":
            rate = rate * tf.pow(self.decay_rate, tf.floor(step / self.steps_per_epoch))
        if self.warmup_steps:
            rate = rate * tf.minimum(1.0, (step + 1.0) / self.warmup_steps)
        return rate

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "kind": self.kind,
            "total_steps": self.total_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "warmup_steps": self.warmup_steps,
            "final_fraction": self.final_fraction,
            "decay_rate": self.decay_rate,
        }


def build_optimizer(train_config, steps_per_epoch):
    """The configured optimiser (global-norm clipping, schedule, loss scaling when mixed)."""
    schedule = WarmupSchedule(
        train_config.learning_rate,
        train_config.lr_schedule,
        steps_per_epoch * train_config.epochs,
        steps_per_epoch,
        train_config.warmup_steps,
        train_config.lr_final_fraction,
        train_config.lr_decay_rate,
    )
    optimizer_class = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop}[
        train_config.optimizer
    ]
    # Clipping happens in the trainer, on the gradients summed over replicas.
    optimizer = optimizer_class(learning_rate=schedule)
    if resolve_precision(train_config.mixed_precision) == "float16":
        # float16's narrow range needs dynamic loss scaling; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def resolve_jit_compile(jit_compile):
    """XLA or not for the train step: true, false, or "auto".

    "auto" means XLA when a GPU or TPU is visible. On CPUs it means plain TensorFlow,
    which `keras-saat bench` measures faster there, with less memory and no compile
    (`benchmarks/RESULTS.md`).
    """
    if isinstance(jit_compile, str):
        if jit_compile != "auto":
            raise KerasSaatError(f'jit_compile {jit_compile!r}: expected true, false or "auto"')
        return any(tf.config.list_physical_devices(kind) for kind in ("GPU", "TPU"))
    return bool(jit_compile)


_XLA_WORDS = ("XLA", "xla", "compil", "Compil", "jit", "Trying to access resource")


def _xla_failure(err):
    return any(k in str(err) for k in _XLA_WORDS)


def _xla_reason(err):
    """The most telling line of an XLA error (TF puts "Graph execution error:" first)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if any(k in line for k in _XLA_WORDS) and "Detected at node" not in line:
            return line[:300]
    return lines[0][:300] if lines else type(err).__name__


class Trainer:
    """Runs `Captioner` training steps under a tf.distribute strategy.

    Create the model and the optimiser inside `strategy.scope()`, then hand them here.

    Args:
        model: Captioner.
        optimizer: keras optimiser (a LossScaleOptimizer for mixed precision).
        strategy: tf.distribute.Strategy. Defaults to the default strategy.
        clipnorm: float. Global gradient norm limit (0 = off). Defaults to 0.
        jit_compile: bool or "auto". XLA for the per-replica forward and backward pass;
            "auto" (the default) is XLA on GPUs and TPUs, not on CPUs (`resolve_jit_compile`).
        log: callable. Receives progress messages. Defaults to print.
        unroll: bool. Teacher forcing unrolled over the T steps (True, the default: the
            fastest step measured, with each kernel's gradient one stacked matmul) or one
            `tf.while_loop` (False: tracing and the XLA compile do not grow with T, for
            runs whose compile outweighs their steps). The trainer sets the model's decoder
            to it when it builds the step (`LSTMDecoder`).
    """

    def __init__(
        self,
        model,
        optimizer,
        strategy=None,
        clipnorm=0.0,
        jit_compile="auto",
        log=print,
        unroll=True,
    ):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        self.clipnorm = float(clipnorm)
        self.jit_compile = resolve_jit_compile(jit_compile)
        if not isinstance(unroll, bool):
            raise KerasSaatError(f"unroll {unroll!r}: expected true or false")
        self.unroll = unroll
        self.log = log
        with self.strategy.scope():
            self.optimizer.build(model.trainable_variables)
        self._step_fn = None
        self._has_run = False

    # -------------------------------------------------------------- data
    def distribute(self, dataset):
        """A dataset of global batches, split over the replicas (data sharding across workers)."""
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return self.strategy.experimental_distribute_dataset(dataset.with_options(options))

    # -------------------------------------------------------------- step
    def _build_step(self, jit_compile):
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        model.decoder.unroll = self.unroll
        reinforce = model.reinforce

        def replica_step(batch):
            # Per-image batches (n, k, T + 1) split over the replicas by image.
            local = tf.cast(tf.shape(batch["tokens"])[0], tf.float32)
            tokens = model.caption_tokens(batch["tokens"])
            global_batch = local * strategy.num_replicas_in_sync
            share = local / global_batch  # this replica's part of the global mean
            with tf.GradientTape() as tape:
                outputs = model(batch, training=True)
                terms = model.loss_terms(outputs, tokens)
                scaled = optimizer.scale_loss(tf.cast(terms["loss"], tf.float32) * share)
            gradients = model.weight_gradients(tape, scaled)
            gradients = [tf.convert_to_tensor(g) for g in gradients]
            words = tf.reduce_sum(tf.cast(tokens[:, 1:] != PAD_ID, tf.float32))
            sums = {
                "loss": tf.cast(terms["loss"], tf.float32) * share,
                "penalty": tf.cast(terms["penalty"], tf.float32) * share,
                "nll_sum": -tf.reduce_sum(tf.cast(terms["log_p_y"], tf.float32)),
                "words": words,
                # The baseline follows the captions decoded with sampled locations.
                "sampled_log_p_sum": tf.reduce_sum(terms["log_p_per_word"] * terms["policy_rows"]),
                "sampled_count": tf.reduce_sum(terms["policy_rows"]),
            }
            return gradients, sums

        replica_fn = tf.function(replica_step, jit_compile=jit_compile, autograph=False)
        variables = model.trainable_variables
        mixed = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        def apply(gradients):
            optimizer.apply(gradients, variables)
            return tf.constant(True)

        @tf.function(autograph=False)
        def step(batch):
            per_replica = strategy.run(replica_fn, args=(batch,))
            gradients, sums = tf.nest.map_structure(  # one tensor at a time (MWMS packs lists)
                lambda v: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None), per_replica
            )
            norm = tf.linalg.global_norm(gradients)
            finite = tf.math.is_finite(sums["loss"]) & tf.math.is_finite(norm)
            if mixed:
                # The loss-scale optimiser skips non-finite steps itself and lowers its scale.
                norm = norm / tf.cast(optimizer.scale_loss(tf.constant(1.0)), norm.dtype)
            if self.clipnorm:
                gradients, _ = tf.clip_by_global_norm(
                    gradients, self.clipnorm, use_norm=tf.where(finite, norm, 1.0)
                )
            if mixed:
                optimizer.apply(gradients, variables)
            else:
                tf.cond(finite, lambda: apply(gradients), lambda: tf.constant(False))
            if reinforce:

                def move_baseline():
                    model.move_baseline(sums["sampled_log_p_sum"], sums["sampled_count"])
                    return tf.constant(True)

                tf.cond(finite, move_baseline, lambda: tf.constant(False))
            return {
                "loss": sums["loss"],
                "nll": sums["nll_sum"] / tf.maximum(sums["words"], 1.0),
                "attention_penalty": sums["penalty"],
                "grad_norm": norm,
                "finite": finite,
            }

        return step

    def trace(self, distributed_batch):
        """Builds and traces the step for this batch's shapes without running it (XLA
        compiles at the first `train_step`). Returns the concrete function."""
        if self._step_fn is None:
            self._step_fn = self._build_step(self.jit_compile)
        return self._step_fn.get_concrete_function(distributed_batch)

    def train_step(self, distributed_batch):
        """One update on a global batch (an element of `distribute(dataset)`); returns scalars."""
        if not self._has_run:
            self._has_run = True
            self._step_fn = self._step_fn or self._build_step(self.jit_compile)
            if self.jit_compile:
                try:
                    return self._step_fn(distributed_batch)
                except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
                    if not _xla_failure(err):
                        raise
                    reason = _xla_reason(err)
                    self.log(
                        f"XLA could not compile the train step ({reason}); running without XLA"
                    )
                    self.jit_compile = False
                    self._step_fn = self._build_step(False)
        return self._step_fn(distributed_batch)


class _Progress:
    """A progress bar on terminals; otherwise a log line at each reporting step."""

    def __init__(self, steps, log):
        self.steps, self.log = steps, log
        self.bar = None
        if sys.stdout.isatty():
            self.bar = keras.utils.Progbar(
                steps, stateful_metrics=["loss", "nll", "captions/s", "lr"], unit_name="step"
            )

    def update(self, epoch, step, values, report):
        if self.bar is not None:
            self.bar.update(min(step, self.steps), list(values.items()))
        elif report:
            shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items())
            self.log(f"  epoch {epoch} step {step}/{self.steps}: {shown}")


class _RunState:
    """The run's progress in variables that checkpoint with the model and optimiser.

    global_step, epoch, step_in_epoch, best_epoch, bad_epochs, finished, best_score and
    nonfinite_total; a run restarted with the same workdir restores them and the per-epoch
    history, and goes on where the last checkpoint left it.
    """

    def __init__(self, trainer, train_config, workdir, chief):
        self.log = trainer.log
        self.chief = chief
        self.values = {name: tf.Variable(0, dtype=tf.int64, trainable=False) for name in _PROGRESS}
        self.values["best_score"] = tf.Variable(-1.0, dtype=tf.float64, trainable=False)
        self.values["nonfinite_total"] = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.checkpoint = tf.train.Checkpoint(
            model_variables=list(trainer.model.variables),
            optimizer_variables=list(trainer.optimizer.variables),
            **self.values,
        )
        directory = Path(workdir) / CHECKPOINT_DIR
        self.scratch = None
        if not chief:  # every worker saves (collectively); only the chief's copy is kept
            self.scratch = tempfile.mkdtemp(prefix="keras-saat-worker-")
            directory = Path(self.scratch)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(directory), max_to_keep=max(train_config.max_checkpoints, 1)
        )
        self.history_path = Path(workdir) / HISTORY_FILE
        self.history = self._read_history()
        self.resumed_from = None
        if self.manager.latest_checkpoint:
            self.checkpoint.restore(
                self.manager.latest_checkpoint
            ).assert_existing_objects_matched()
            self.resumed_from = self["global_step"]
            self.log(
                f"resuming from {self.manager.latest_checkpoint}: epoch {self['epoch'] + 1}, "
                f"step {self['step_in_epoch']} of the epoch ({self.resumed_from} steps done)"
            )
            self.history = [h for h in self.history if h["epoch"] <= self["epoch"]]

    def __getitem__(self, name):
        value = self.values[name].numpy()
        return float(value) if name == "best_score" else int(value)

    def _read_history(self):
        if not (self.history_path.exists() and self.chief):
            return []
        try:
            return json.loads(self.history_path.read_text())
        except json.JSONDecodeError:
            self.log(f"{self.history_path} is damaged; the per-epoch history restarts from here")
            return []

    def save(self):
        self.manager.save(checkpoint_number=self["global_step"])

    def write_history(self):
        if self.chief:
            write_json_atomic(self.history_path, self.history)

    def close(self):
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def summary(self, seconds):
        return {
            "best_score": self["best_score"],
            "best_epoch": self["best_epoch"],
            "epochs_run": self["epoch"],
            "global_step": self["global_step"],
            "nonfinite_steps": self["nonfinite_total"],
            "resumed_from": self.resumed_from,
            "train_seconds": seconds,
            "history": self.history,
        }


def train_loop(
    trainer,
    epoch_dataset,
    steps_per_epoch,
    train_config,
    workdir,
    metrics,
    save_best,
    batch_size,
    chief=True,
    callbacks=(),
):
    """Epochs of `trainer` steps with checkpoints, resume, validation and early stopping.

    Args:
        trainer: Trainer.
        epoch_dataset: callable(epoch) -> tf.data.Dataset of global batches; the same
            epoch number must give the same order (seeded).
        steps_per_epoch: int. Expected steps per epoch (progress display and schedules).
        train_config: TrainConfig. epochs, patience, checkpoint_every, max_checkpoints,
            max_nonfinite_steps, log_every.
        workdir: path. Checkpoints go to <workdir>/checkpoints (the chief's).
        metrics: `keras_saat.callbacks.CaptionMetrics`, the first callback: after every
            epoch its scores ("bleu_4", 0-1) pick the best model and decide early stopping.
        save_best: callable(). Saves the current model as the best (called on the chief).
        batch_size: int. Global batch (throughput display).
        chief: bool. This worker writes checkpoints and the history. Defaults to True.
        callbacks: keras.callbacks.Callback objects, as `fit()` takes them, called through a
            `keras.callbacks.CallbackList`: on_train_batch_end(batch in the epoch from 0,
            logs of loss, nll, attention_penalty, grad_norm and learning_rate),
            on_epoch_end(epoch from 0, logs of loss and nll, to which `metrics` adds the
            validation scores as val_bleu4, val_cider, ...); setting `model.stop_training`
            ends the run after the epoch.

    Returns:
        dict: best_score, best_epoch, epochs_run, global_step, nonfinite_steps, resumed_from,
        train_seconds, history (per-epoch dicts).
    """
    run = _RunState(trainer, train_config, workdir, chief)
    hooks = keras.callbacks.CallbackList(
        [metrics, *callbacks],
        model=trainer.model,
        epochs=train_config.epochs,
        steps=steps_per_epoch,
        batch_size=batch_size,
        initial_step=run["global_step"],  # a resumed run's steps so far
    )
    trainer.model.stop_training = False
    started = time.perf_counter()
    try:
        if run["finished"]:
            trainer.log("this run already finished (delete the checkpoints folder to train again)")
        else:
            hooks.on_train_begin()
            while not run["finished"]:
                epoch = run["epoch"]
                if epoch >= train_config.epochs:
                    run.values["finished"].assign(1)
                    run.save()
                    break
                hooks.on_epoch_begin(epoch)
                data = epoch_dataset(epoch)
                totals = run_epoch(
                    trainer, run, data, steps_per_epoch, train_config, batch_size, hooks
                )
                end_epoch(trainer, run, totals, metrics, save_best, train_config, hooks)
            hooks.on_train_end({"best_val_bleu4": run["best_score"]})
    finally:
        run.close()
    return run.summary(time.perf_counter() - started)


def run_epoch(trainer, run, data, steps_per_epoch, train_config, batch_size, hooks):
    """Trains one epoch (from the step a checkpoint stopped at); returns its loss totals."""
    epoch = run["epoch"]
    if run["step_in_epoch"]:
        data = data.skip(run["step_in_epoch"])
    progress = _Progress(steps_per_epoch, trainer.log)
    window_start, window_steps = time.perf_counter(), 0
    totals = {"loss": 0.0, "nll": 0.0, "n": 0, "start": time.perf_counter()}
    nonfinite_run = 0
    for batch in trainer.distribute(data):
        values = {k: v.numpy() for k, v in trainer.train_step(batch).items()}
        run.values["global_step"].assign_add(1)
        run.values["step_in_epoch"].assign_add(1)
        step, in_epoch = run["global_step"], run["step_in_epoch"]
        if not values["finite"]:
            nonfinite_run += 1
            _skip_nonfinite(trainer, run, values, step, nonfinite_run, train_config)
            continue
        nonfinite_run = 0
        totals["loss"] += float(values["loss"])
        totals["nll"] += float(values["nll"])
        totals["n"] += 1
        window_steps += 1
        shown = {"loss": float(values["loss"]), "nll": float(values["nll"])}
        report = step % max(train_config.log_every, 1) == 0  # global steps
        if report or progress.bar is not None:  # the schedule is read only when shown
            shown["lr"] = float(trainer.optimizer.learning_rate)
        if report:
            elapsed = time.perf_counter() - window_start
            shown["captions/s"] = window_steps * batch_size / max(elapsed, 1e-9)
            window_start, window_steps = time.perf_counter(), 0
        progress.update(epoch + 1, in_epoch, shown, report)
        logs = {
            "loss": float(values["loss"]),
            "nll": float(values["nll"]),
            "attention_penalty": float(values["attention_penalty"]),
            "grad_norm": float(values["grad_norm"]),
        }
        if "lr" in shown:
            logs["learning_rate"] = shown["lr"]
        hooks.on_train_batch_end(in_epoch - 1, logs)
        if train_config.checkpoint_every and step % train_config.checkpoint_every == 0:
            run.save()
    return totals


def _skip_nonfinite(trainer, run, values, step, nonfinite_run, train_config):
    """Counts a step whose update was skipped; stops the run after too many in a row."""
    run.values["nonfinite_total"].assign_add(1)
    trainer.log(
        f"  step {step}: non-finite loss or gradient (loss {values['loss']}, "
        f"gradient norm {values['grad_norm']}); update skipped"
    )
    if nonfinite_run >= train_config.max_nonfinite_steps:
        raise KerasSaatError(
            f"{nonfinite_run} steps in a row had a non-finite loss or gradient "
            f"(stopped at step {step}); lower train.learning_rate, keep "
            "train.clipnorm on, or check the data. The last checkpoint is kept."
        )


def end_epoch(trainer, run, totals, metrics, save_best, train_config, hooks):
    """Validates (the callbacks' epoch end, `metrics` first), keeps the best model, records
    the history, and decides on early stopping."""
    epoch = run["epoch"]
    seconds = time.perf_counter() - totals["start"]
    loss, nll = totals["loss"] / max(totals["n"], 1), totals["nll"] / max(totals["n"], 1)
    hooks.on_epoch_end(epoch, {"loss": loss, "nll": nll})
    scores = dict(metrics.scores)
    bleu4 = float(scores["bleu_4"])
    improved = bleu4 > run["best_score"]
    if improved:
        run.values["best_score"].assign(bleu4)
        run.values["best_epoch"].assign(epoch + 1)
        run.values["bad_epochs"].assign(0)
        if run.chief:
            save_best()
    else:
        run.values["bad_epochs"].assign_add(1)
    record = {
        "epoch": epoch + 1,
        "steps": run["step_in_epoch"],
        "loss": loss,
        "nll": nll,
        "val": scores,
        "seconds": seconds,
    }
    run.history.append(record)
    trainer.log(
        f"  epoch {epoch + 1}/{train_config.epochs}: loss {record['loss']:.3f}, "
        f"nll/word {record['nll']:.3f}, val BLEU-4 {100 * bleu4:.1f}"
        f"{' (best)' if improved else ''} ({seconds:.0f}s)"
    )
    run.values["epoch"].assign_add(1)
    run.values["step_in_epoch"].assign(0)
    patience = train_config.patience
    if patience and run["bad_epochs"] >= patience and epoch + 1 < train_config.epochs:
        trainer.log(
            f"  early stop: no better val BLEU-4 for {patience} epochs "
            f"(best {100 * run['best_score']:.1f} at epoch {run['best_epoch']})"
        )
        run.values["finished"].assign(1)
    if trainer.model.stop_training:
        trainer.log(f"  stopped by a callback after epoch {epoch + 1}")
        run.values["finished"].assign(1)
    run.write_history()
    run.save()
