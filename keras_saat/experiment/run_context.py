"""What a run starts before any TensorFlow work: compile cache, XLA flags, the strategy."""

import dataclasses
from pathlib import Path

import tensorflow as tf

from keras_saat.runtime.precision import resolve_precision
from keras_saat.runtime.xla import enable_compilation_cache, set_xla_defaults
from keras_saat.training.trainer import is_chief, make_strategy
from keras_saat.workdir import XLA_CACHE_DIR


@dataclasses.dataclass(frozen=True)
class RunContext:
    """A started run's process-wide settings.

    Args:
        strategy: tf.distribute.Strategy.
        chief: bool. Whether this worker writes the workdir's files.
        replicas: int. Replicas in sync.
        precision: str. The compute precision ("float32", "mixed_float16", ...).
        cached: Path or None. The XLA compilation cache's folder; None when off.
    """

    strategy: object
    chief: bool
    replicas: int
    precision: str
    cached: object = None


def start_runtime(train_config, workdir):
    """The settings TensorFlow reads when it starts, then the distribution strategy."""
    # Before any TensorFlow work: TensorFlow reads the cache setting when it starts.
    cached = train_config.compilation_cache and enable_compilation_cache(workdir / XLA_CACHE_DIR)
    # GPU compile settings; each fusion's autotuning result kept beside the compiled steps.
    set_xla_defaults(Path(cached) / "autotune" if cached else None)
    # MultiWorkerMirroredStrategy must exist before any other TensorFlow work.
    strategy = make_strategy(train_config.distribute)
    if train_config.deterministic:
        tf.config.experimental.enable_op_determinism()
    return RunContext(
        strategy=strategy,
        chief=is_chief(strategy),
        replicas=strategy.num_replicas_in_sync,
        precision=resolve_precision(train_config.mixed_precision),
        cached=cached or None,
    )
