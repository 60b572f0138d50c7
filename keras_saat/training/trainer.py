"""The command-line trainer: GradientTape steps with XLA, any tf.distribute strategy.

Each replica computes its share of the global mean loss and its gradients; the
gradients are summed across replicas, a step with a non-finite loss or norm is skipped,
and the rest are clipped and applied. With XLA and one replica the whole step is one
executable (`one_executable`). The loop around it is `keras_saat.training.loop`.
"""

import os

import keras
import tensorflow as tf

from keras_saat.errors import KerasSaatError
from keras_saat.losses import caption_rows
from keras_saat.runtime.xla import resolve_jit_compile
from keras_saat.text.vocabulary import PAD_ID


def make_strategy(name="default"):
    """A tf.distribute strategy by config name: "default", "mirrored" or "multi_worker"
    (which reads TF_CONFIG and must precede any other TensorFlow work)."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
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
    if resolver is None or not resolver.task_type or resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


_XLA_WORDS = ("XLA", "xla", "compil", "Compil", "jit", "Trying to access resource")


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
        jit_compile: bool or "auto". XLA for the per-replica pass; "auto" is XLA on GPUs and
            TPUs, not CPUs. Defaults to "auto".
        log: callable. Receives progress messages. Defaults to print.
        unroll: bool. `LSTMDecoder.unroll` for training. Defaults to True.
        resident: ResidentFeatures or None. Features held on the device: batches carry
            "image_index" and each replica gathers its rows in the step. Defaults to None.
        one_executable: bool or "auto". With XLA and one replica, the whole step in one XLA
            executable; "auto": wherever it applies. Defaults to "auto".
        fused_scores: bool or None. `LSTMDecoder.fused_scores` for training; None leaves
            Eq. 4 to autodiff. Defaults to None.
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
        resident=None,
        one_executable="auto",
        fused_scores=None,
    ):
        self.model = model
        self.resident = resident
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        self.clipnorm = float(clipnorm)
        self.jit_compile = resolve_jit_compile(jit_compile)
        if not isinstance(unroll, bool):
            raise KerasSaatError(f"unroll {unroll!r}: expected true or false")
        self.unroll = unroll
        if one_executable not in (True, False, "auto"):
            raise KerasSaatError(
                f'one_executable {one_executable!r}: expected true, false or "auto"'
            )
        if fused_scores not in (True, False, None):
            raise KerasSaatError(f"fused_scores {fused_scores!r}: expected true, false or None")
        self.one_executable = one_executable
        self.fused_scores = fused_scores
        self.log = log
        with self.strategy.scope():
            self.optimizer.build(model.trainable_variables)
        self._step_fn = None
        self._has_run = False

    def distribute(self, dataset):
        """A dataset of global batches, split over the replicas (data sharding across workers)."""
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return self.strategy.experimental_distribute_dataset(dataset.with_options(options))

    def whole_step_compiled(self, jit_compile):
        """Whether the step is one XLA executable (`one_executable`) under `jit_compile`."""
        split = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
        applies = self.strategy.num_replicas_in_sync == 1 and not isinstance(self.strategy, split)
        return bool(jit_compile and applies) and self.one_executable in (True, "auto")

    def _build_step(self, jit_compile):
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        model.decoder.unroll = self.unroll
        model.decoder.fused_scores = bool(self.fused_scores)
        whole = self.whole_step_compiled(jit_compile)
        reinforce = model.reinforce
        resident = self.resident

        def caption_count(batch):  # padding rows hold none
            return tf.reduce_sum(caption_rows(model.caption_tokens(batch["tokens"])))

        def replica_step(batch, captions, total_captions):
            if "image_index" in batch:  # rows of the device-resident features
                if resident is None:
                    raise KerasSaatError(
                        "batches of image indices need the features they index: "
                        "Trainer(resident=ResidentFeatures(...))"
                    )
                batch = {
                    "features": resident.gather(batch["image_index"]),
                    "tokens": batch["tokens"],
                }
            # The loss is a mean over the global batch's captions: each replica's mean
            # weighs its share of them (padding rows make the shares unequal).
            tokens = model.caption_tokens(batch["tokens"])
            share = captions / tf.maximum(total_captions, 1.0)
            with tf.GradientTape() as tape:
                outputs = model(batch, training=True)
                terms = model.loss_terms(outputs, tokens)
                scaled = optimizer.scale_loss(tf.cast(terms["loss"], tf.float32) * share)
            gradients = [tf.convert_to_tensor(g) for g in model.weight_gradients(tape, scaled)]
            sums = {
                "loss": tf.cast(terms["loss"], tf.float32) * share,
                "penalty": tf.cast(terms["penalty"], tf.float32) * share,
                "nll_sum": -tf.reduce_sum(tf.cast(terms["log_p_y"], tf.float32)),
                "words": tf.reduce_sum(tf.cast(tokens[:, 1:] != PAD_ID, tf.float32)),
                # The baseline follows the captions decoded with sampled locations.
                "sampled_log_p_sum": tf.reduce_sum(terms["log_p_per_word"] * terms["policy_rows"]),
                "sampled_count": tf.reduce_sum(terms["policy_rows"]),
            }
            return gradients, sums

        # In one executable the replica's pass is traced into the step itself.
        replica_fn = (
            replica_step
            if whole
            else tf.function(replica_step, jit_compile=jit_compile, autograph=False)
        )
        variables = model.trainable_variables
        mixed = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        def apply(gradients):
            optimizer.apply(gradients, variables)
            return tf.constant(True)

        @tf.function(autograph=False, jit_compile=True if whole else None)
        def step(batch):
            captions = strategy.run(caption_count, args=(batch,))
            total_captions = strategy.reduce(tf.distribute.ReduceOp.SUM, captions, axis=None)
            per_replica = strategy.run(replica_fn, args=(batch, captions, total_captions))
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
        """The step's concrete function for this batch's shapes, traced without running."""
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
                    if not any(k in str(err) for k in _XLA_WORDS):
                        raise
                    self.log(
                        f"XLA could not compile the train step ({_xla_reason(err)}); "
                        "running without XLA"
                    )
                    self.jit_compile = False
                    self._step_fn = self._build_step(False)
        return self._step_fn(distributed_batch)
