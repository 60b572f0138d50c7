"""REINFORCE (Eq. 12): what may carry a gradient and what must not, and the whole
hard-attention gradient against finite differences of the NumPy reference."""

import keras
import numpy as np
import tensorflow as tf

from keras_saat import Captioner, losses
from keras_saat.layers import HardAttention, LSTMDecoder
from keras_saat.text import Vocabulary
from tests import reference as ref

B, L, D, N, A, M, K, T = 4, 5, 4, 6, 3, 5, 9, 4


def test_the_reward_carries_no_gradient_to_the_word_probabilities():
    """d loss / d logits is the NLL's alone: log p(y|s,a) - b enters REINFORCE as a constant."""
    rng = np.random.default_rng(0)
    logits = tf.Variable(rng.normal(size=(3, 4, K)).astype("float32"))
    alphas = ref.softmax(rng.normal(size=(3, 4, L))).astype("float32")
    tokens = np.array([[2, 5, 6, 7, 3], [2, 7, 3, 0, 0], [2, 5, 3, 0, 0]], np.int32)
    policy = {
        "log_p_samples": tf.constant(rng.normal(-1.5, 0.3, size=(3, 4)).astype("float32")),
        "entropies": tf.constant(rng.uniform(0.5, 1.5, size=(3, 4)).astype("float32")),
        "use_expectation": tf.constant([False, False, True]),
    }
    with tf.GradientTape(persistent=True) as tape:
        hard = losses.caption_loss(
            {"logits": logits, "alphas": alphas, **policy},
            tokens,
            baseline=-2.0,
            reinforce_weight=1.0,
            entropy_weight=0.01,
            attention=HardAttention,
        )
        soft = losses.caption_loss({"logits": logits, "alphas": alphas}, tokens)
    np.testing.assert_allclose(
        tape.gradient(hard["loss"], logits), tape.gradient(soft["loss"], logits), atol=1e-7
    )


def test_the_expected_context_baseline_carries_no_gradient():
    """With reinforce_baseline expected_context, b = log p(y | E[s], a) is a constant: the
    weights' gradient is the same as with its value pasted in."""
    vocab = Vocabulary.build([["a", "red", "blue", "circle", "square"]])
    model = Captioner(
        vocab.words,
        attention="hard",
        feature_dim=8,
        embedding_dim=8,
        lstm_units=8,
        attention_units=8,
        dropout=0.0,
        hard_soft_probability=0.0,  # every caption samples: every row has a REINFORCE term
        reinforce_baseline="expected_context",
        seed=3,
    )
    rng = np.random.default_rng(1)
    inputs = {
        "features": rng.normal(size=(4, 64, 128)).astype("float32"),
        "tokens": vocab.encode_batch([["a", "red", "circle"], ["a", "blue", "square"]] * 2, 5),
    }
    with tf.GradientTape(persistent=True) as tape:
        outputs = model(inputs, training=True)
        as_given = model.loss_terms(outputs, inputs["tokens"])["loss"]
        pasted = {**outputs, "baseline_logits": tf.constant(outputs["baseline_logits"].numpy())}
        as_constant = model.loss_terms(pasted, inputs["tokens"])["loss"]
    weights = model.trainable_weights
    # The model hands it over as a constant, whatever the loss does with it.
    assert all(g is None for g in tape.gradient(outputs["baseline_logits"], weights))
    for got, expected in zip(
        tape.gradient(as_given, weights), tape.gradient(as_constant, weights), strict=True
    ):
        np.testing.assert_allclose(
            tf.convert_to_tensor(got), tf.convert_to_tensor(expected), atol=1e-6
        )


def attention_surrogate(decoder_weights, a, ids, samples, rows, mask, reward, lambdas):
    """-[lambda_r R sum_t log alpha_{t, s_t} + lambda_e sum_t H_t] summed over captions (NumPy)."""
    out = ref.decoder(a, ids, decoder_weights, samples, rows == 0)
    alphas = out["alphas"]
    log_p = np.log(np.take_along_axis(alphas, samples[..., None], -1)[..., 0])
    entropy = -(alphas * np.log(alphas)).sum(-1)
    per_caption = lambdas[0] * reward * (log_p * mask).sum(1) + lambdas[1] * (entropy * mask).sum(1)
    return -(rows * per_caption).sum()


def test_the_hard_attention_gradient_matches_finite_differences_of_the_reference():
    """Through the recurrence: W_a, b_a, W_h, v and f_beta, with the samples held fixed."""
    keras.utils.set_random_seed(0)
    decoder = LSTMDecoder(
        K, M, N, A, attention="hard", dropout=0.0, seed=4,
        attention_options={"hard_soft_probability": 0.25},
    )  # fmt: skip
    decoder.build(D)
    rng = np.random.default_rng(2)
    for weight in decoder.trainable_weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype("float32"))
    a = rng.normal(size=(B, L, D)).astype("float32")
    ids = rng.integers(4, K, size=(B, T)).astype("int32")
    mask = np.ones((B, T))
    mask[1, 2:] = 0.0
    reward = rng.normal(-1.0, 1.0, size=B)
    lambdas = (0.7, 0.05)
    attention = decoder.attention
    variables = {
        "Wa": attention.annotation_projection.kernel,
        "ba": attention.annotation_projection.bias,
        "Wh": attention.hidden_projection.kernel,
        "v": attention.score.kernel,
        "Wb": attention.gate.kernel,
        "bb": attention.gate.bias,
    }
    with tf.GradientTape() as tape:
        out = decoder(a, ids, training=True)
        rows = 1.0 - tf.cast(out["use_expectation"], tf.float32)
        surrogate = losses.reinforce_surrogate(
            tf.constant(reward, tf.float32),
            out["log_p_samples"],
            out["entropies"],
            tf.constant(mask, tf.float32),
            rows,
            0.0,
            *lambdas,
        )
        total = tf.reduce_sum(surrogate)
    gradients = dict(zip(variables, tape.gradient(total, list(variables.values())), strict=True))
    samples, rows = out["samples"].numpy(), rows.numpy().astype(np.float64)
    assert 0 < rows.sum() < B  # both sampled and expected-context captions

    weights = ref.decoder_weights(decoder)
    args = (a.astype(np.float64), ids, samples, rows, mask, reward, lambdas)
    eps = 1e-6
    for name, gradient in gradients.items():
        numeric = np.zeros(weights["att"][name].shape)
        for index in np.ndindex(numeric.shape):
            for sign in (1, -1):
                weights["att"][name][index] += sign * eps
                numeric[index] += sign * attention_surrogate(weights, *args) / (2 * eps)
                weights["att"][name][index] -= sign * eps
        assert np.abs(numeric).max() > 1e-3, name  # the weight does reach the surrogate
        np.testing.assert_allclose(gradient, numeric, rtol=2e-3, atol=2e-4, err_msg=name)
