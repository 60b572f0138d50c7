"""The training loop: epochs of Trainer steps with checkpoints, exact resume, validation,
early stopping, and Keras callbacks as its hooks.

A `tf.train.Checkpoint` holds every model variable (seed states and the REINFORCE
baseline included), the optimiser and the run's progress; an epoch's data order is a
function of the seed and the epoch, so a resumed run asks for that epoch's batches from
its step on. With `deterministic` on, a run killed and restarted ends with the same
weights as an uninterrupted one.
"""

import json
import shutil
import tempfile
import time
from pathlib import Path

import keras
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import raise_write_failure, write_json_atomic
from keras_saat.runtime.interrupts import stop_at_step_boundaries, stop_requested
from keras_saat.training.progress import Progress
from keras_saat.workdir import CHECKPOINT_DIR, HISTORY_FILE

_PROGRESS = ("global_step", "epoch", "step_in_epoch", "best_epoch", "bad_epochs", "finished")
_EPOCH_SUMS = ("epoch_loss_sum", "epoch_nll_sum", "epoch_steps")


class _RunState:
    """The run's progress in variables that checkpoint with the model and optimiser; a run
    restarted in the same workdir restores them and the history and goes on from there."""

    def __init__(self, trainer, train_config, workdir, chief):
        self.log = trainer.log
        self.chief = chief
        self.values = {name: tf.Variable(0, dtype=tf.int64, trainable=False) for name in _PROGRESS}
        self.values["best_score"] = tf.Variable(-1.0, dtype=tf.float64, trainable=False)
        self.values["nonfinite_total"] = tf.Variable(0, dtype=tf.int64, trainable=False)
        # The epoch's running sums checkpoint with the step, so an epoch resumed after a
        # kill reports the mean over all its steps, as an uninterrupted one does.
        for name in _EPOCH_SUMS:
            self.values[name] = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.checkpoint = tf.train.Checkpoint(
            model_variables=list(trainer.model.variables),
            optimizer_variables=list(trainer.optimizer.variables),
            **self.values,
        )
        # Every worker saves (collectively); only the chief's copy is kept.
        self.scratch = None if chief else tempfile.mkdtemp(prefix="keras-saat-worker-")
        directory = Path(workdir) / CHECKPOINT_DIR if chief else Path(self.scratch)
        if chief:
            self._sweep_unfinished(directory)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(directory), max_to_keep=max(train_config.max_checkpoints, 1)
        )
        self.history_path = Path(workdir) / HISTORY_FILE
        self.history = self._read_history()
        self.resumed_from = None
        if restored := self._restore_newest_whole():
            self.resumed_from = self["global_step"]
            self.log(
                f"resuming from {restored}: epoch {self['epoch'] + 1}, "
                f"step {self['step_in_epoch']} of the epoch ({self.resumed_from} steps done)"
            )
            self.history = [h for h in self.history if h["epoch"] <= self["epoch"]]

    def _sweep_unfinished(self, directory):
        """Removes the `ckpt-N_temp` folders a killed or refused checkpoint write left."""
        unfinished = [p for p in Path(directory).glob("ckpt-*_temp*") if p.is_dir()]
        for path in unfinished:
            shutil.rmtree(path, ignore_errors=True)
        if unfinished:
            self.log(f"removed {len(unfinished)} unfinished checkpoint(s) in {directory}")

    def save(self):
        """A checkpoint of the run; a refused write becomes a one-line error, its files removed."""
        path = Path(self.manager.directory) / f"ckpt-{self['global_step']}"
        try:
            self.manager.save(checkpoint_number=self["global_step"])
        except Exception as err:
            self._sweep_unfinished(self.manager.directory)
            raise_write_failure(err, path)
            raise

    def _restore_newest_whole(self):
        """The path of the newest checkpoint that restores whole (older ones are tried when a
        newer one is damaged), or None when there is none; a KerasSaatError when none reads."""
        tried = []
        for path in reversed(self.manager.checkpoints):
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except Exception as err:  # TF raises IndexError, OpError, ValueError, ... here
                reason = " ".join(str(err).split())[:200]
                tried.append(path)
                self.log(f"{path} cannot be read ({reason}); trying the one before it")
                continue
            return path
        if tried:
            raise KerasSaatError(
                f"none of the {len(tried)} checkpoints in {Path(tried[0]).parent} can be read "
                "(damaged, or written by another model); remove that folder to train from the "
                "start, or give another --workdir"
            )
        return None

    def __getitem__(self, name):
        value = self.values[name].numpy()
        return float(value) if name == "best_score" or name in _EPOCH_SUMS else int(value)

    def _read_history(self):
        if not (self.history_path.exists() and self.chief):
            return []
        try:
            history = json.loads(self.history_path.read_text())
            if isinstance(history, list) and all(
                isinstance(h, dict) and isinstance(h.get("epoch"), int) for h in history
            ):
                return history
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            pass
        self.log(f"{self.history_path} is damaged; the per-epoch history restarts from here")
        return []

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
        epoch_dataset: callable(epoch, start_step) -> tf.data.Dataset of the epoch's
            global batches from batch `start_step` on, in the same (seeded) order each time.
        steps_per_epoch: int. Expected steps per epoch (progress display and schedules).
        train_config: TrainConfig.
        workdir: path. Checkpoints go to <workdir>/checkpoints (the chief's).
        metrics: `keras_saat.callbacks.CaptionMetrics`, the first callback: its "bleu_4"
            picks the best model and decides early stopping.
        save_best: callable(). Saves the current model as the best (called on the chief).
        batch_size: int. Global batch (throughput display).
        chief: bool. This worker writes checkpoints and the history. Defaults to True.
        callbacks: keras.callbacks.Callback objects, as `fit()` takes them. Batch logs hold
            loss, nll, attention_penalty (when lambda > 0), grad_norm and learning_rate;
            `model.stop_training` ends the run after the epoch.

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
        # A SIGINT or SIGTERM stops at a step boundary, with a checkpoint to resume from.
        with stop_at_step_boundaries():
            if run["finished"]:
                trainer.log(
                    "this run already finished (delete the checkpoints folder to train again)"
                )
            else:
                hooks.on_train_begin()
                while not run["finished"]:
                    stop_if_asked(run, trainer)  # a signal during validation or saving
                    epoch = run["epoch"]
                    if epoch >= train_config.epochs:
                        run.values["finished"].assign(1)
                        run.save()
                        break
                    hooks.on_epoch_begin(epoch)
                    data = epoch_dataset(epoch, run["step_in_epoch"])
                    totals = run_epoch(
                        trainer, run, data, steps_per_epoch, train_config, batch_size, hooks
                    )
                    end_epoch(trainer, run, totals, metrics, save_best, train_config, hooks)
                hooks.on_train_end({"best_val_bleu4": run["best_score"]})
    finally:
        run.close()
    return run.summary(time.perf_counter() - started)


def run_epoch(trainer, run, data, steps_per_epoch, train_config, batch_size, hooks):
    """Trains one epoch from the step a checkpoint stopped at; returns its loss totals."""
    epoch = run["epoch"]
    progress = Progress(steps_per_epoch, trainer.log)
    window_start, window_steps = time.perf_counter(), 0
    if not run["step_in_epoch"]:  # a new epoch (a resumed one keeps its sums)
        for name in _EPOCH_SUMS:
            run.values[name].assign(0.0)
    totals = {"start": time.perf_counter()}
    nonfinite_run = 0
    for batch in trainer.distribute(data):
        stop_if_asked(run, trainer)  # also after a skipped step
        values = {k: v.numpy() for k, v in trainer.train_step(batch).items()}
        run.values["global_step"].assign_add(1)
        run.values["step_in_epoch"].assign_add(1)
        step, in_epoch = run["global_step"], run["step_in_epoch"]
        if not values["finite"]:
            nonfinite_run += 1
            _skip_nonfinite(trainer, run, values, step, nonfinite_run, train_config)
            continue
        nonfinite_run = 0
        logs = {"loss": float(values["loss"]), "nll": float(values["nll"])}
        run.values["epoch_loss_sum"].assign_add(logs["loss"])
        run.values["epoch_nll_sum"].assign_add(logs["nll"])
        run.values["epoch_steps"].assign_add(1.0)
        window_steps += 1
        shown = dict(logs)
        report = step % max(train_config.log_every, 1) == 0  # global steps
        if report or progress.bar is not None:  # the schedule is read only when shown
            shown["lr"] = float(trainer.optimizer.learning_rate)
        if report:
            elapsed = time.perf_counter() - window_start
            shown["captions/s"] = window_steps * batch_size / max(elapsed, 1e-9)
            window_start, window_steps = time.perf_counter(), 0
        progress.update(epoch + 1, in_epoch, shown, report)
        if trainer.model.doubly_stochastic_lambda:  # a term of the loss only then
            logs["attention_penalty"] = float(values["attention_penalty"])
        logs["grad_norm"] = float(values["grad_norm"])
        if "lr" in shown:
            logs["learning_rate"] = shown["lr"]
        hooks.on_train_batch_end(in_epoch - 1, logs)
        if train_config.checkpoint_every and step % train_config.checkpoint_every == 0:
            run.save()
        stop_if_asked(run, trainer)
    return totals


def stop_if_asked(run, trainer):
    """At a step boundary, after a SIGINT or SIGTERM: a checkpoint, then KeyboardInterrupt."""
    signal_name = stop_requested()
    if signal_name is None:
        return
    run.save()
    trainer.log(
        f"{signal_name}: stopped at step {run['global_step']} with a checkpoint in "
        f"{run.manager.directory}; the same command resumes from it"
    )
    raise KeyboardInterrupt(signal_name)


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
    """Validates, keeps the best model, records the history and decides on early stopping."""
    epoch = run["epoch"]
    seconds = time.perf_counter() - totals["start"]
    counted = max(run["epoch_steps"], 1.0)
    loss, nll = run["epoch_loss_sum"] / counted, run["epoch_nll_sum"] / counted
    validated = metrics.due(epoch)
    hooks.on_epoch_end(epoch, {"loss": loss, "nll": nll})
    scores = dict(metrics.scores) if validated else None
    improved = validated and float(scores["bleu_4"]) > run["best_score"]
    if improved:
        run.values["best_score"].assign(float(scores["bleu_4"]))
        run.values["best_epoch"].assign(epoch + 1)
        run.values["bad_epochs"].assign(0)
        if run.chief:
            save_best()
    elif validated:  # an epoch between validations is neither better nor worse
        run.values["bad_epochs"].assign_add(1)
    record = {"epoch": epoch + 1, "steps": run["step_in_epoch"], "loss": loss, "nll": nll}
    run.history.append({**record, "val": scores, "seconds": seconds})
    shown = f"val BLEU-4 {float(scores['bleu_4']):.3f}" if validated else "not validated"
    trainer.log(
        f"  epoch {epoch + 1}/{train_config.epochs}: loss {loss:.3f}, nll/word {nll:.3f}, "
        f"{shown}{' (best)' if improved else ''} ({seconds:.0f}s)"
    )
    run.values["epoch"].assign_add(1)
    run.values["step_in_epoch"].assign(0)
    patience = train_config.patience
    if patience and run["bad_epochs"] >= patience and epoch + 1 < train_config.epochs:
        trainer.log(
            f"  early stop: no better val BLEU-4 in {patience} validations "
            f"(best {run['best_score']:.3f} at epoch {run['best_epoch']})"
        )
        run.values["finished"].assign(1)
    if trainer.model.stop_training:
        trainer.log(f"  stopped by a callback after epoch {epoch + 1}")
        run.values["finished"].assign(1)
    run.write_history()
    run.save()
