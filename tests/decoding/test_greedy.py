"""greedy_search against next_fns with known answers."""

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.decoding import greedy_search

END, PAD, K = 3, 0, 6


def scripted_next_fn(script):
    """Each row follows its script: at step t the scripted token gets probability 0.9."""
    script = tf.constant(script, tf.int32)  # (B, S)

    def next_fn(tokens, state):
        step = state["step"]
        target = script[:, tf.minimum(step, script.shape[1] - 1)]
        probs = tf.one_hot(target, K) * 0.9 + 0.1 / K * (1 - tf.one_hot(target, K))
        probs = probs / tf.reduce_sum(probs, -1, keepdims=True)
        marker = tf.cast(tokens, tf.float32)[:, None] * tf.ones((1, 2))
        return tf.math.log(probs), {"step": step + 1, "seen": marker}

    return next_fn


def initial_state(batch):
    return {"step": tf.constant(0), "seen": tf.zeros((batch, 2))}


@pytest.mark.parametrize("jit", [False, True])
def test_greedy_follows_the_argmax_and_stops_at_end(jit):
    script = [[4, 5, END, 1, 1], [5, END, 1, 1, 1]]
    fn = tf.function(
        lambda: greedy_search(
            scripted_next_fn(script), initial_state(2), tf.fill([2], 2), END, 6, record=("seen",)
        ),
        jit_compile=jit,
    )
    out = {k: v.numpy() for k, v in fn().items()}
    np.testing.assert_array_equal(
        out["tokens"], [[4, 5, END, PAD, PAD, PAD], [5, END, PAD, PAD, PAD, PAD]]
    )
    np.testing.assert_array_equal(out["lengths"], [3, 2])
    p_top = 0.9 / (0.9 + 0.1 / K * (K - 1))
    np.testing.assert_allclose(out["log_prob"], [3 * np.log(p_top), 2 * np.log(p_top)], rtol=1e-5)
    # The recorded state of step t saw the previous token; zeros after the caption ended.
    np.testing.assert_array_equal(out["seen"][0, :, 0], [2, 4, 5, 0, 0, 0])
    np.testing.assert_array_equal(out["seen"][1, :, 0], [2, 5, 0, 0, 0, 0])


def test_greedy_without_an_end_token_returns_full_length():
    script = [[4, 5, 4, 5, 4, 5, 4, 5]]
    out = greedy_search(scripted_next_fn(script), initial_state(1), tf.fill([1], 2), END, 4)
    np.testing.assert_array_equal(out["tokens"].numpy(), [[4, 5, 4, 5]])
    assert int(out["lengths"][0]) == 4


def test_greedy_picks_the_most_probable_token_from_real_logits():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(K, K)).astype("float32")  # logits depend on the previous token only

    def next_fn(tokens, state):
        return tf.gather(table, tokens), state

    out = greedy_search(next_fn, {"x": tf.zeros((3,))}, tf.constant([0, 1, 2]), END, 5)
    for row, first in enumerate([0, 1, 2]):
        token, expected = first, []
        for _ in range(5):
            token = int(np.argmax(table[token]))
            expected.append(token)
            if token == END:
                break
        got = out["tokens"].numpy()[row][: len(expected)]
        np.testing.assert_array_equal(got, expected)
