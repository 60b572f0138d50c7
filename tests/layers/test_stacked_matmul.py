"""StepMatmuls and LoopMatmuls give the values and gradients of per-step tf.matmul, in
unrolled loops, in tf.while_loop and in the decoder."""

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.layers import lstm_decoder
from keras_saat.layers.stacked_matmul import LoopMatmuls, StepMatmuls
from tests.helpers import decoder_run

B, T = 4, 6


class PlainMatmuls:
    """The reference: one tf.matmul per step, differentiated by autodiff as usual."""

    def __init__(self, kernel, steps, rows):
        self.kernel = kernel

    def __call__(self, x):
        return tf.matmul(x, self.kernel)


def recurrence(matmuls_class, kernel, inputs, rows):
    """A tanh recurrence x_t = tanh(inputs_t + x_{t-1} W) whose last output is left unused."""
    matmuls = matmuls_class(kernel, T, rows)
    x = inputs[0]
    total = 0.0
    for t in range(T):
        y = matmuls(x)
        if t < T - 1:
            x = tf.tanh(inputs[t + 1] + y)
            total += tf.reduce_sum(x * tf.cos(tf.range(tf.size(x), dtype=x.dtype)[: x.shape[-1]]))
    return total


def gradients(matmuls_class, kernel, inputs, rows, compiled):
    def run():
        with tf.GradientTape() as tape:
            tape.watch([kernel, inputs])
            loss = recurrence(matmuls_class, kernel, tf.unstack(inputs), rows)
        return [loss, *tape.gradient(loss, [kernel, inputs])]

    return [v.numpy() for v in (tf.function(run)() if compiled else run())]


def recurrence_inputs(batched, seed):
    """(kernel, inputs (T, ...), rows): a weight (n, n) with inputs (B, n), or a
    per-example kernel (B, n, n) with inputs (B, 2, n), the annotations' case."""
    rng = np.random.default_rng(seed)
    if batched:
        kernel = tf.constant(rng.normal(0, 0.5, (B, 5, 5)), tf.float32)
        return kernel, tf.constant(rng.normal(size=(T, B, 2, 5)), tf.float32), [B, 2]
    kernel = tf.constant(rng.normal(0, 0.5, (5, 5)), tf.float32)
    return kernel, tf.constant(rng.normal(size=(T, B, 5)), tf.float32), [B]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_values_and_gradients_equal_per_step_matmuls(batched, compiled):
    kernel, inputs, rows = recurrence_inputs(batched, seed=0)
    got = gradients(StepMatmuls, kernel, inputs, rows, compiled)
    want = gradients(PlainMatmuls, kernel, inputs, rows, compiled)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert np.abs(got[1]).max() > 0.1  # the kernel gradient is not trivially zero


class PlainLoopMatmuls:
    """The loop's reference: one tf.matmul an iteration, autodiff's kernel gradient."""

    def __init__(self, kernel, steps, rows):
        self.kernel, self.last_input = kernel, None

    def at(self, t):
        return lambda x: tf.matmul(x, self.kernel)

    def record(self, inputs):
        pass


def loop_recurrence(matmuls_class, kernel, inputs, rows):
    """`recurrence` as one tf.while_loop, the first step before it (as the decoder runs it);
    each iteration writes the matmul's input to a TensorArray for `record`."""
    matmuls = matmuls_class(kernel, T, rows)
    x = inputs[0]
    y = matmuls.at(0)(x)
    written = tf.TensorArray(x.dtype, size=T, element_shape=x.shape).write(0, x)
    weights = tf.cos(tf.range(x.shape[-1], dtype=x.dtype))

    def body(t, y, total, written):
        matmuls.last_input = None  # a new step
        x = tf.tanh(inputs[t] + y)
        return t + 1, matmuls.at(t)(x), total + tf.reduce_sum(x * weights), written.write(t, x)

    _, _, total, written = tf.while_loop(
        lambda t, *_: t < T,
        body,
        (tf.constant(1), y, tf.constant(0.0), written),
        maximum_iterations=T - 1,  # XLA's TensorArrays need it
    )
    matmuls.record(written.stack())
    return total


@pytest.mark.parametrize("compiled", [False, True, "xla"])
@pytest.mark.parametrize("batched", [False, True])
def test_loop_matmuls_values_and_gradients_equal_per_step_matmuls(batched, compiled):
    kernel, inputs, rows = recurrence_inputs(batched, seed=2)

    def run(matmuls_class):
        def inner():
            with tf.GradientTape() as tape:
                tape.watch([kernel, inputs])
                loss = loop_recurrence(matmuls_class, kernel, inputs, rows)
            return [loss, *tape.gradient(loss, [kernel, inputs])]

        if compiled:
            inner = tf.function(inner, jit_compile=compiled == "xla")
        return [v.numpy() for v in inner()]

    got, want = run(LoopMatmuls), run(PlainLoopMatmuls)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert np.abs(got[1]).max() > 0.1  # the kernel gradient is not trivially zero


def test_loop_matmuls_called_twice_in_a_step_is_an_error():
    """Two products in one step would share row t of the probes, and their kernel
    gradient would pair the second input with both dy: refused."""
    matmuls = LoopMatmuls(tf.ones((3, 3)), 2, [1])
    matmuls.at(0)(tf.ones((1, 3)))
    with pytest.raises(RuntimeError, match="twice in one step"):
        matmuls.at(0)(tf.ones((1, 3)))
    matmuls.last_input = None  # the next step
    matmuls.at(1)(tf.ones((1, 3)))


def test_loop_matmuls_gradient_without_recorded_inputs_is_an_error():
    kernel = tf.ones((3, 3))
    with tf.GradientTape() as tape:
        tape.watch(kernel)
        matmuls = LoopMatmuls(kernel, 1, [1])
        loss = tf.reduce_sum(matmuls.at(0)(tf.ones((1, 3))))
    with pytest.raises(RuntimeError, match="record"):
        tape.gradient(loss, kernel)


def test_wrong_number_of_steps_is_an_error():
    kernel = tf.ones((3, 3))
    matmuls = StepMatmuls(kernel, 2, [1])
    matmuls(tf.ones((1, 3)))
    matmuls(tf.ones((1, 3)))
    with pytest.raises(RuntimeError, match="built for 2 steps"):
        matmuls(tf.ones((1, 3)))
    with tf.GradientTape() as tape:
        tape.watch(kernel)
        short = StepMatmuls(kernel, 3, [1])
        loss = tf.reduce_sum(short(tf.ones((1, 3))))
    with pytest.raises(RuntimeError, match="called 1 times"):
        tape.gradient(loss, kernel)


def decoder_gradients(monkeypatch, attention, gating, plain):
    if plain:
        monkeypatch.setattr(lstm_decoder, "StepMatmuls", PlainMatmuls)
    loss, grads, out = decoder_run(attention, gating, unroll=True, compiled=None)
    return loss, grads, out["samples"].numpy() if attention == "hard" else None


@pytest.mark.parametrize(
    "attention,gating", [("soft", True), ("soft", False), ("hard", True)]
)  # fmt: skip
def test_decoder_gradients_equal_those_of_per_step_matmuls(monkeypatch, attention, gating):
    loss, got, samples = decoder_gradients(monkeypatch, attention, gating, plain=False)
    with monkeypatch.context() as patch:
        plain_loss, want, plain_samples = decoder_gradients(patch, attention, gating, plain=True)
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-6)
    if attention == "hard":
        np.testing.assert_array_equal(samples, plain_samples)
    assert got.keys() == want.keys()
    for name in got:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    kernels = [n for n in got if "recurrent_kernel" in n or "context_kernel" in n]
    assert len(kernels) == 2 and all(np.abs(got[n]).max() > 1e-3 for n in kernels)


@pytest.mark.parametrize("compiled", [False, True])
def test_attention_scores_gradient_equals_autodiff(compiled):
    """The scores e = tanh(.) v with the written-out gradient, against tf.matmul's autodiff."""
    from keras_saat.layers.soft_attention import _scores

    rng = np.random.default_rng(1)
    energy = tf.constant(np.tanh(rng.normal(size=(B, 7, 5))), tf.float32)
    kernel = tf.constant(rng.normal(size=(5, 1)), tf.float32)
    weights = tf.constant(rng.normal(size=(B, 7)), tf.float32)

    def run(scores):
        def inner():
            with tf.GradientTape() as tape:
                tape.watch([energy, kernel])
                loss = tf.reduce_sum(tf.sin(scores(energy, kernel)) * weights)
            return [loss, *tape.gradient(loss, [energy, kernel])]

        return [v.numpy() for v in (tf.function(inner)() if compiled else inner())]

    got = run(_scores)
    want = run(lambda e, k: tf.squeeze(tf.matmul(e, k), -1))
    assert got[1].shape == (B, 7, 5) and got[2].shape == (5, 1)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
