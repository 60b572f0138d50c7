"""The GradientTape trainer: same objective as fit(), non-finite steps, schedules, early stopping."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat import Captioner
from keras_saat.callbacks import CaptionMetrics
from keras_saat.config import TrainConfig
from keras_saat.errors import KerasSaatError
from keras_saat.text import Vocabulary
from keras_saat.training.loop import train_loop
from keras_saat.training.optimization import WarmupSchedule
from keras_saat.training.trainer import Trainer

WORDS = "a red blue circle square at the top left on right".split()


def tiny_model(**kwargs):
    vocab = Vocabulary.build([WORDS])
    settings = dict(feature_dim=16, embedding_dim=8, lstm_units=12, attention_units=8, seed=1)
    settings.update(kwargs)
    keras.utils.set_random_seed(1)
    return Captioner(vocab.words, **settings), vocab


def batches(vocab, n=16, batch_size=8, seed=0, nan=False):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 64, 128)).astype("float32")
    if nan:
        features[:] = np.nan
    captions = [list(rng.choice(WORDS, size=rng.integers(2, 6))) for _ in range(n)]
    data = {"features": features, "tokens": vocab.encode_batch(captions, 6)}
    return tf.data.Dataset.from_tensor_slices(data).batch(batch_size, drop_remainder=True)


def weights_of(model):
    return [np.array(v) for v in model.trainable_variables]


def test_jit_compile_auto_is_xla_only_on_accelerators():
    model, _ = tiny_model()
    accelerated = any(tf.config.list_physical_devices(k) for k in ("GPU", "TPU"))
    assert Trainer(model, keras.optimizers.SGD(0.1), log=None).jit_compile is accelerated
    assert Trainer(model, keras.optimizers.SGD(0.1), jit_compile=True, log=None).jit_compile
    with pytest.raises(KerasSaatError, match="jit_compile 'yes'"):
        Trainer(model, keras.optimizers.SGD(0.1), jit_compile="yes", log=None)


def test_trainer_unrolls_unless_told():
    model, _ = tiny_model()
    optimizer = keras.optimizers.Adam(1e-3)
    assert Trainer(model, optimizer, jit_compile=True, log=None).unroll is True
    assert Trainer(model, optimizer, jit_compile=True, unroll=False, log=None).unroll is False
    with pytest.raises(KerasSaatError, match="unroll 'yes'"):
        Trainer(model, optimizer, unroll="yes", log=None)


@pytest.mark.slow
def test_trainer_steps_in_loop_form_match_unrolled_steps():
    """Two Adam updates: the trainer sets the decoder's form, and both forms give the same
    weights (under XLA, test_trainer_step_equals_fit_step compares the loop with them)."""
    batch = next(iter(batches(tiny_model()[1])))
    weights = []
    for unroll in (True, False):
        model, _ = tiny_model(dropout=0.0)
        trainer = Trainer(model, keras.optimizers.Adam(1e-2), jit_compile=False, unroll=unroll)
        losses = [float(trainer.train_step(batch)["loss"]) for _ in range(2)]
        assert model.decoder.unroll is unroll and losses[-1] < losses[0]
        weights.append(weights_of(model))
    for unrolled, looped in zip(*weights, strict=True):
        np.testing.assert_allclose(looped, unrolled, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True])
def test_trainer_step_equals_fit_step(jit):
    """The custom loop and fit() optimise the same function: one SGD step, same weights,
    whichever form teacher forcing takes."""
    data = batches(tiny_model()[1])
    model_a, _ = tiny_model(dropout=0.0)
    model_b, _ = tiny_model(dropout=0.0)
    for a, b in zip(weights_of(model_a), weights_of(model_b), strict=True):
        np.testing.assert_array_equal(a, b)

    # Under XLA, fit() runs teacher forcing as a tf.while_loop; the trainer unrolls it.
    model_a.decoder.unroll = not jit
    model_a.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit)
    history = model_a.fit(data.take(1), epochs=1, verbose=0)

    trainer = Trainer(model_b, keras.optimizers.SGD(0.1), jit_compile=jit, log=lambda m: None)
    (batch,) = list(trainer.distribute(data.take(1)))
    values = trainer.train_step(batch)

    np.testing.assert_allclose(float(values["loss"]), history.history["loss"][0], rtol=1e-5)
    np.testing.assert_allclose(float(values["nll"]), history.history["nll"][0], rtol=1e-5)
    assert bool(values["finite"])
    for a, b in zip(weights_of(model_a), weights_of(model_b), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_one_executable_reads_zero_and_one_as_false_and_true():
    """The config's YAML may give 0 or 1; 0 is the split step, as False is."""
    model, _ = tiny_model()
    for given, whole in ((0, False), (1, True), (False, False), (True, True), ("auto", True)):
        trainer = Trainer(
            model, keras.optimizers.SGD(0.1), one_executable=given, log=lambda m: None
        )
        assert trainer.whole_step_compiled(True) is whole, given
        assert trainer.whole_step_compiled(False) is False


@pytest.mark.slow
def test_one_executable_step_equals_the_split_step():
    """With XLA and one replica the whole step (pass, norm, clipping, the finite guard,
    Adam, the baseline) is one XLA computation; two hard-attention updates give the
    weights of the split step (only the replica's pass compiled, autodiff's scores), and a
    non-finite batch is still skipped inside it."""
    vocab = tiny_model()[1]
    data = list(batches(vocab, n=16, batch_size=8))
    runs = []
    for whole in (True, False):
        model, _ = tiny_model(attention="hard", dropout=0.0)
        trainer = Trainer(  # SGD: a gradient off by any factor moves the weights apart
            model, keras.optimizers.SGD(0.5), clipnorm=50.0, jit_compile=True,
            one_executable=whole, fused_scores=whole, log=lambda m: None,
        )  # fmt: skip
        assert trainer.whole_step_compiled(True) is whole
        losses = [float(trainer.train_step(batch)["loss"]) for batch in data]
        assert model.decoder.fused_scores is whole
        if whole:  # the step itself is an XLA function (the split one refuses this)
            assert trainer._step_fn.experimental_get_compiler_ir(data[0])(stage="hlo")
            (nan_batch,) = list(batches(vocab, n=8, nan=True))
            before, iterations = weights_of(model), int(trainer.optimizer.iterations)
            assert not bool(trainer.train_step(nan_batch)["finite"])
            for a, b in zip(weights_of(model), before, strict=True):
                np.testing.assert_array_equal(a, b)
            assert int(trainer.optimizer.iterations) == iterations
        runs.append((losses, weights_of(model), float(model.baseline)))
    with pytest.raises(ValueError, match="jit_compile=True"):  # the split step is not one
        trainer._step_fn.experimental_get_compiler_ir(data[0])(stage="hlo")
    (losses, weights, baseline), (split_losses, split_weights, split_baseline) = runs
    np.testing.assert_allclose(losses, split_losses, rtol=1e-5)
    np.testing.assert_allclose(baseline, split_baseline, rtol=1e-5)
    for a, b in zip(weights, split_weights, strict=True):  # a wrong gradient: about 1e-2
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5)


def test_global_norm_clipping_bounds_the_update():
    model, vocab = tiny_model(dropout=0.0)
    before = weights_of(model)
    trainer = Trainer(model, keras.optimizers.SGD(1.0), clipnorm=0.01, log=lambda m: None)
    (batch,) = list(trainer.distribute(batches(vocab).take(1)))
    values = trainer.train_step(batch)
    assert float(values["grad_norm"]) > 0.01  # the raw gradient is larger than the limit
    change = np.sqrt(
        sum(np.sum((a - b) ** 2) for a, b in zip(weights_of(model), before, strict=True))
    )
    np.testing.assert_allclose(change, 0.01, rtol=1e-4)  # lr 1 x clipped norm


def test_non_finite_step_is_skipped_and_counted():
    model, vocab = tiny_model(attention="hard")
    trainer = Trainer(model, keras.optimizers.Adam(1e-2), clipnorm=5.0, log=lambda m: None)
    before = weights_of(model)
    baseline = float(model.baseline)
    (batch,) = list(trainer.distribute(batches(vocab, nan=True).take(1)))
    values = trainer.train_step(batch)
    assert not bool(values["finite"])
    for a, b in zip(weights_of(model), before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert float(model.baseline) == baseline
    assert int(trainer.optimizer.iterations) == 0  # Adam's step count did not move


class ScriptedScores(CaptionMetrics):
    """The validation callback with scores given in advance (no captioning)."""

    def __init__(self, scores):
        super().__init__((["unused.png"], [["a caption"]]), images=0)
        self.scripted = scores

    def evaluate(self, model):
        return {"bleu_4": self.scripted()}


def loop_config(**kwargs):
    settings = dict(epochs=4, checkpoint_every=0, log_every=1000, max_nonfinite_steps=3)
    settings.update(kwargs)
    return TrainConfig(**settings)


def test_many_non_finite_steps_stop_the_run(tmp_path):
    model, vocab = tiny_model()
    trainer = Trainer(model, keras.optimizers.Adam(1e-2), log=lambda m: None)
    with pytest.raises(KerasSaatError, match="3 steps in a row had a non-finite loss"):
        train_loop(
            trainer,
            lambda epoch, start: batches(vocab, n=64, nan=True),
            8,
            loop_config(),
            tmp_path,
            metrics=ScriptedScores(lambda: 0.0),
            save_best=lambda: None,
            batch_size=8,
        )


def test_early_stopping_keeps_the_best_epoch(tmp_path):
    model, vocab = tiny_model()
    trainer = Trainer(model, keras.optimizers.Adam(1e-2), log=lambda m: None)
    scores = iter([0.30, 0.50, 0.45, 0.40, 0.60, 0.70])
    saved = []
    result = train_loop(
        trainer,
        lambda epoch, start: batches(vocab, seed=epoch),
        2,
        loop_config(epochs=6, patience=2),
        tmp_path,
        metrics=ScriptedScores(lambda: next(scores)),
        save_best=lambda: saved.append(int(trainer.optimizer.iterations)),
        batch_size=8,
    )
    assert result["epochs_run"] == 4  # epochs 3 and 4 did not beat epoch 2
    assert result["best_epoch"] == 2 and result["best_score"] == pytest.approx(0.5)
    assert saved == [2, 4]  # saved after epochs 1 and 2 only
    assert [h["epoch"] for h in result["history"]] == [1, 2, 3, 4]

    # The same command again: the run is finished and nothing more trains.
    again = train_loop(
        trainer,
        lambda epoch, start: batches(vocab, seed=epoch),
        2,
        loop_config(epochs=6, patience=2),
        tmp_path,
        metrics=ScriptedScores(lambda: pytest.fail("a finished run does not validate again")),
        save_best=lambda: None,
        batch_size=8,
    )
    assert again["resumed_from"] == 8 and again["global_step"] == 8


@pytest.mark.parametrize(
    "kind, step, expected",
    [
        ("constant", 0, 1e-3 * 1 / 10),  # warm-up: (0 + 1) / 10 of the peak
        ("constant", 50, 1e-3),
        ("cosine", 100, 1e-3 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 0.5)))),
        ("cosine", 1000, 1e-3 * 0.1),
        ("exponential", 45, 1e-3 * 0.9**2),  # 20 steps an epoch: two decays at step 45
    ],
)
def test_learning_rate_schedules(kind, step, expected):
    schedule = WarmupSchedule(1e-3, kind, total_steps=200, steps_per_epoch=20, warmup_steps=10)
    np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-6)
    restored = WarmupSchedule.from_config(schedule.get_config())
    np.testing.assert_allclose(float(restored(step)), expected, rtol=1e-6)


@pytest.mark.slow
def test_mixed_precision_trains_with_loss_scaling():
    from keras_saat.runtime.precision import dtype_policy

    vocab = tiny_model()[1]
    with dtype_policy("float16"):
        model, _ = tiny_model()
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
    assert keras.config.dtype_policy().name == "float32"  # restored after building
    assert model.decoder.compute_dtype == "float16" and model.decoder.variable_dtype == "float32"
    trainer = Trainer(model, optimizer, clipnorm=5.0, jit_compile=False, log=lambda m: None)
    losses = []
    for _ in range(8):
        for batch in trainer.distribute(batches(vocab)):
            values = trainer.train_step(batch)
            if bool(values["finite"]):
                losses.append(float(values["loss"]))
    assert len(losses) >= 8 and np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    assert len(model.generate(features=np.zeros((2, 64, 128), np.float32))) == 2


def test_validate_every_validates_some_epochs_and_the_last(tmp_path):
    model, vocab = tiny_model()
    trainer = Trainer(model, keras.optimizers.Adam(1e-2), log=lambda m: None)
    evaluated = []
    scores = iter([0.30, 0.20, 0.10])

    def scripted():
        evaluated.append(1)
        return next(scores)

    metrics = ScriptedScores(scripted)
    metrics.every = 2
    result = train_loop(
        trainer,
        lambda epoch, start: batches(vocab, seed=epoch),
        2,
        loop_config(epochs=5, patience=2),
        tmp_path,
        metrics=metrics,
        save_best=lambda: None,
        batch_size=8,
    )
    assert len(evaluated) == 3  # epochs 2, 4 and 5 (the last)
    assert [h["val"] is not None for h in result["history"]] == [0, 1, 0, 1, 1]
    assert result["best_epoch"] == 2 and result["epochs_run"] == 5


class StopAt(keras.callbacks.Callback):
    """Raises at a batch, as a killed run stops (after its last checkpoint)."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            raise KeyboardInterrupt


def test_a_resumed_run_asks_for_its_epoch_from_the_checkpointed_step(tmp_path):
    """The loop hands the dataset the (epoch, step) of the checkpoint and trains every
    batch it gets: the data starts there, nothing is skipped by the loop."""
    model, vocab = tiny_model()
    trainer = Trainer(model, keras.optimizers.Adam(1e-2), log=lambda m: None)
    asked = []

    def epoch_dataset(epoch, start):
        asked.append((epoch, start))
        return batches(vocab, n=48, seed=epoch).skip(start)  # 6 batches an epoch

    config = loop_config(epochs=2, checkpoint_every=4, patience=0)
    run = dict(metrics=ScriptedScores(lambda: 0.1), save_best=lambda: None, batch_size=8)
    with pytest.raises(KeyboardInterrupt):  # at epoch 1's 5th step, after ckpt-4
        train_loop(trainer, epoch_dataset, 6, config, tmp_path, callbacks=[StopAt(4)], **run)
    result = train_loop(trainer, epoch_dataset, 6, config, tmp_path, **run)
    assert asked == [(0, 0), (0, 4), (1, 0)]
    assert result["resumed_from"] == 4 and result["global_step"] == 12
    assert [h["steps"] for h in result["history"]] == [6, 6]


def test_a_damaged_latest_checkpoint_resumes_from_the_one_before(tmp_path):
    """The newest checkpoint's data cut in half, then every index garbled; a history.json of
    the wrong shape."""
    model, vocab = tiny_model()
    trainer = Trainer(model, keras.optimizers.Adam(1e-2), log=lambda m: None)
    config = loop_config(epochs=2, checkpoint_every=2, patience=0)
    run = dict(metrics=ScriptedScores(lambda: 0.1), save_best=lambda: None, batch_size=8)
    train_loop(trainer, lambda epoch, start: batches(vocab, seed=epoch).skip(start), 2,
               config, tmp_path, **run)  # fmt: skip
    checkpoints = tmp_path / "checkpoints"
    newest = tf.train.latest_checkpoint(str(checkpoints))
    data = next(checkpoints.glob(f"{newest.rsplit('/', 1)[1]}.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    (tmp_path / "history.json").write_text('{"epoch": "two"}')
    lines = []
    trainer = Trainer(tiny_model()[0], keras.optimizers.Adam(1e-2), log=lines.append)
    result = train_loop(trainer, lambda epoch, start: batches(vocab, seed=epoch).skip(start), 2,
                        config, tmp_path, **run)  # fmt: skip
    assert any(f"{newest} cannot be read" in line for line in lines)
    assert any("history.json is damaged" in line for line in lines)
    assert result["resumed_from"] < result["global_step"] == 4

    for index in checkpoints.glob("*.index"):
        index.write_bytes(b"garbled" * 10)
    trainer = Trainer(tiny_model()[0], keras.optimizers.Adam(1e-2), log=lambda m: None)
    with pytest.raises(KerasSaatError, match="checkpoints in .* can be read"):
        train_loop(trainer, lambda epoch, start: batches(vocab, seed=epoch).skip(start), 2,
                   config, tmp_path, **run)  # fmt: skip
