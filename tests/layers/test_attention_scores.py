"""StepScores and LoopScores, Eq. 4 fused over the steps (unrolled and in the loop):
autodiff's values and gradients, and no (B, L, units) tensor kept for the backward pass."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.layers import attention_scores
from keras_saat.layers.attention_scores import StepScores, summed_gradients
from tests.helpers import decoder_run


def scores_run(fused, steps=4, seed=0):
    """Loss and gradients (projected, v, each query) of T steps of scores under a
    nonlinear loss, with StepScores or with autodiff's tanh-then-matmul."""
    rng = np.random.default_rng(seed)
    projected = tf.constant(rng.normal(size=(3, 7, 5)), tf.float32)
    v = tf.constant(rng.normal(size=(5, 1)), tf.float32)
    queries = [tf.constant(rng.normal(size=(3, 5)), tf.float32) for _ in range(steps)]
    weights = [tf.constant(rng.normal(size=(3, 7)), tf.float32) for _ in range(steps)]
    with tf.GradientTape() as tape:
        tape.watch([projected, v, *queries])
        block = StepScores(projected, v, steps) if fused else None
        loss = 0.0
        for query, weight in zip(queries, weights, strict=True):
            if fused:
                scores = block(query)
            else:
                scores = tf.matmul(tf.tanh(projected + query[:, None, :]), v)[..., 0]
            loss += tf.reduce_sum(tf.nn.softmax(scores) * weight)  # as alpha feeds the step
    return loss, tape.gradient(loss, [projected, v, *queries])


@pytest.mark.parametrize("compiled", [None, True])
def test_step_scores_equal_autodiff(compiled):
    def fused():
        return scores_run(True)

    run = fused if compiled is None else tf.function(fused, jit_compile=True)
    loss, grads = run()
    want_loss, want_grads = scores_run(False)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    names = ["projected", "v", "q0", "q1", "q2", "q3"]
    for got, want, name in zip(grads, want_grads, names, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.abs(want).max() > 1e-2, name  # every gradient carries signal


def test_step_scores_refuse_a_step_too_many():
    block = StepScores(tf.zeros((1, 2, 3)), tf.zeros((3, 1)), steps=1)
    block(tf.zeros((1, 3)))
    with pytest.raises(RuntimeError, match="built for 1 steps"):
        block(tf.zeros((1, 3)))


@pytest.mark.parametrize(
    "attention,compiled,unroll",
    [
        ("soft", None, True),
        pytest.param("soft", True, True, marks=pytest.mark.slow),
        ("hard", None, True),
        ("soft", None, False),
        ("soft", True, False),
        ("hard", False, False),
        pytest.param("hard", True, False, marks=pytest.mark.slow),
    ],
)
def test_a_decoder_with_fused_scores_equals_autodiffs(attention, compiled, unroll, monkeypatch):
    """Unrolled (`StepScores`) or in the loop (`LoopScores`), against autodiff's unrolled
    pass: the same loss, outputs and gradients, and the fused block's own gradient ran."""
    loss, grads, out = decoder_run(attention, True, True, compiled)
    summed = []

    def counted(*args):
        summed.append(args)
        return summed_gradients(*args)

    monkeypatch.setattr(attention_scores, "summed_gradients", counted)
    fused_loss, fused_grads, fused_out = decoder_run(
        attention, True, unroll, compiled, fused_scores=True
    )
    assert len(summed) == 1  # once a pass: p's and v's gradients summed over the steps
    np.testing.assert_allclose(fused_loss, loss, rtol=1e-5)
    for key in out:
        np.testing.assert_allclose(
            np.asarray(fused_out[key], "float32"), np.asarray(out[key], "float32"),
            rtol=1e-5, atol=1e-6, err_msg=key,
        )  # fmt: skip
    for name, want in grads.items():
        np.testing.assert_allclose(fused_grads[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    names = [n for n in grads if "W_a" in n or n.endswith("v/kernel")]
    assert len(names) >= 2 and all(np.abs(grads[n]).max() > 1e-3 for n in names)


def test_fused_scores_keep_no_energy_for_the_backward_pass():
    """Autodiff's backward of tanh reads the stored energy (a TanhGrad op per step); the
    fused block's backward recomputes it from p and q_t and has none."""

    def tanh_grads(fused):
        rng = np.random.default_rng(0)
        projected = tf.constant(rng.normal(size=(4, 9, 6)), tf.float32)
        v = tf.constant(rng.normal(size=(6, 1)), tf.float32)
        queries = tf.constant(rng.normal(size=(3, 4, 6)), tf.float32)

        @tf.function
        def run(projected, v, queries):
            with tf.GradientTape() as tape:
                tape.watch([projected, v, queries])
                block = StepScores(projected, v, 3) if fused else None
                loss = 0.0
                for t in range(3):
                    q = queries[t]
                    if fused:
                        s = block(q)
                    else:
                        s = tf.matmul(tf.tanh(projected + q[:, None, :]), v)[..., 0]
                    loss += tf.reduce_sum(tf.nn.softmax(s) ** 2)
            return tape.gradient(loss, [projected, v, queries])

        graph = run.get_concrete_function(projected, v, queries).graph
        return sum(op.type == "TanhGrad" for op in graph.get_operations())

    assert tanh_grads(False) == 3
    assert tanh_grads(True) == 0


def _scores_gradient(steps=3, shape=(4, 9, 6)):
    """A tf.function of the gradients (p, v, queries) of `steps` fused score steps, and
    its arguments."""
    rng = np.random.default_rng(0)
    batch, length, units = shape
    args = (
        tf.constant(rng.normal(size=shape), tf.float32),
        tf.constant(rng.normal(size=(units, 1)), tf.float32),
        tf.constant(rng.normal(size=(steps, batch, units)), tf.float32),
    )

    def run(projected, v, queries):
        with tf.GradientTape() as tape:
            tape.watch([projected, v, queries])
            block = StepScores(projected, v, steps)
            loss = sum(tf.reduce_sum(tf.nn.softmax(block(queries[t])) ** 2) for t in range(steps))
        return tape.gradient(loss, [projected, v, queries])

    return run, args


def test_the_summed_gradients_store_no_energy_under_xla():
    """Under XLA, d p and d v are two reductions over the T steps, each recomputing the
    tanh as it reads p: the optimised HLO writes no (B, L, A) tensor but d p itself and
    no (T, B, L, A) one, and computes the tanh 2T + 2 times (forward, each step's query
    gradient, the two sums). One tanh feeding both sums would be stored."""
    steps, shape = 3, (4, 9, 6)
    run, args = _scores_gradient(steps, shape)
    hlo = tf.function(run, jit_compile=True).experimental_get_compiler_ir(*args)(
        stage="optimized_hlo"
    )
    entry = hlo[hlo.index("\nENTRY") :].splitlines()[1:]
    dims = ",".join(map(str, shape))
    written = [
        line for line in entry
        if re.search(rf"= f32\[(\d+,)?{dims}\]", line) and " parameter(" not in line
    ]  # fmt: skip
    assert len(written) == 1 and "fusion(" in written[0], written  # d p
    assert len(re.findall(r" tanh\(", hlo)) == 2 * steps + 2
    got = tf.function(run, jit_compile=True)(*args)
    want = tf.function(run)(*args)  # outside XLA: summed step by step
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_outside_xla_the_summed_gradients_hold_one_step_at_a_time():
    """Outside XLA every op writes its result, so the sums go step by step: one sequential
    loop (one iteration at a time), and no tensor of the (T, B, L, A) shape of all the
    steps' energies at once."""
    run, args = _scores_gradient()
    graph = tf.function(run).get_concrete_function(*args).graph
    ranks = {out.shape.rank for op in graph.get_operations() for out in op.outputs}
    loops = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    assert 4 not in ranks
    assert [op.get_attr("parallel_iterations") for op in loops] == [1]


@pytest.mark.slow  # four XLA compiles in a subprocess
def test_the_loop_stacks_no_energy_with_fused_scores():
    """Autodiff's loop stacks every step's (B, L, A) energy for its backward loop; with
    `LoopScores` the optimised HLO holds no tensor of n steps' energies at its top level."""
    script = Path(__file__).parents[2] / "benchmarks" / "fused_scores_hlo.py"
    done = subprocess.run(
        [sys.executable, str(script), "5", "float32"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(script.parents[1])}, timeout=600, check=True,
    )  # fmt: skip
    rows = {(r["form"], r["scores"]): r for r in map(json.loads, done.stdout.splitlines())}
    assert rows["loop", "autodiff"]["tbla_written"] >= 1  # the stack the check looks for
    assert rows["loop", "fused"]["tbla_written"] == 0
    assert rows["unrolled", "fused"]["bla_written"] == 1  # d(W_a a) alone
    for form in ("loop", "unrolled"):
        fused, autodiff = rows[form, "fused"], rows[form, "autodiff"]
        assert fused["bytes_written"] * 2 < autodiff["bytes_written"], form


def test_loop_scores_refuse_a_second_call_in_a_step_and_a_missing_record():
    from keras_saat.layers.attention_scores import LoopScores

    projected, v = tf.random.normal((2, 3, 4)), tf.random.normal((4, 1))
    scores = LoopScores(projected, v, 2)
    scores.at(0)(tf.zeros((2, 4)))
    with pytest.raises(RuntimeError, match="twice in one step"):
        scores.at(0)(tf.zeros((2, 4)))
    with tf.GradientTape() as tape:
        tape.watch(projected)
        scores = LoopScores(projected, v, 1)
        s = scores.at(0)(tf.ones((2, 4)))
    with pytest.raises(RuntimeError, match="record"):
        tape.gradient(s, projected)


@pytest.mark.parametrize(
    "precision,unroll", [("bfloat16", True), ("float16", True), ("bfloat16", False)]
)
def test_fused_scores_under_mixed_precision_follow_autodiffs(precision, unroll):
    """The block computes in the compute dtype and reduces in float32: close to autodiff's
    pass in the same precision (which rounds its matmul differently)."""
    loss, grads, _ = decoder_run("soft", True, True, None, precision=precision)
    fused_loss, fused_grads, _ = decoder_run(
        "soft", True, unroll, None, precision=precision, fused_scores=True
    )
    np.testing.assert_allclose(fused_loss, loss, rtol=2e-2)
    for name, want in grads.items():
        scale = np.abs(want).max() + 1e-6
        assert np.abs(fused_grads[name] - want).max() / scale < 5e-2, name


def test_a_type_that_overrides_attend_is_not_fused():
    """Fusing replaces SoftAttention's own Eq. 4; a type with an `attend` of its own (the
    registry's extension point) keeps it, and gets none of the new arguments."""
    from keras_saat.layers.lstm_decoder import _scores_as_built
    from keras_saat.layers.soft_attention import SoftAttention

    class Dot(SoftAttention):
        def attend(self, projected, hidden, query=None):
            return tf.nn.softmax(tf.reduce_sum(projected, -1))

    assert _scores_as_built(SoftAttention(4)) and not _scores_as_built(Dot(4))
