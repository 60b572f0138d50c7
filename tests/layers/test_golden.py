"""The layers against a float64 NumPy implementation of the paper's equations (to 1e-5)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_saat import losses
from keras_saat.layers import HardAttention, LSTMDecoder, SoftAttention
from tests import reference as ref

B, L, D, N, A, M, K, T = 3, 6, 5, 7, 4, 8, 11, 5
TOL = dict(rtol=1e-5, atol=1e-5)


def randomise(layer, seed=0, scale=0.4):
    """Non-trivial weights: every variable drawn from N(0, scale^2)."""
    rng = np.random.default_rng(seed)
    for weight in layer.trainable_weights:
        weight.assign(rng.normal(0.0, scale, weight.shape).astype("float32"))


def inputs(seed=1):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(B, L, D)).astype("float32")
    h = rng.normal(size=(B, N)).astype("float32")
    ids = rng.integers(0, K, size=(B, T)).astype("int32")
    return a, h, ids


@pytest.mark.parametrize("gating", [True, False])
def test_soft_attention_matches_equations_4_to_6_and_13(gating):
    layer = SoftAttention(A, gating=gating)
    layer.build(D, N)
    randomise(layer)
    a, h, _ = inputs()
    out = layer(a, layer.project(a), h)
    alpha, beta, z = ref.soft_attention(
        a.astype(np.float64), h.astype(np.float64), ref.attention_weights(layer)
    )
    np.testing.assert_allclose(out["alpha"], alpha, **TOL)
    np.testing.assert_allclose(out["beta"], beta, **TOL)
    np.testing.assert_allclose(out["z"], z, **TOL)
    np.testing.assert_allclose(np.sum(out["alpha"], axis=-1), 1.0, **TOL)
    assert out["beta"].shape == (B, 1)  # a scalar per caption, not a vector
    if not gating:
        np.testing.assert_array_equal(out["beta"], 1.0)


def test_hard_attention_uses_the_sampled_location_or_the_expectation():
    layer = HardAttention(A, seed=3)
    layer.build(D, N)
    randomise(layer)
    a, h, _ = inputs()
    use_expectation = tf.constant([True, False, False])
    out = layer(a, layer.project(a), h, training=True, use_expectation=use_expectation)
    alpha, beta, z_soft = ref.soft_attention(
        a.astype(np.float64), h.astype(np.float64), ref.attention_weights(layer)
    )
    s = out["sample"].numpy()
    np.testing.assert_allclose(out["alpha"], alpha, **TOL)
    np.testing.assert_allclose(out["z"][0], z_soft[0], **TOL)
    np.testing.assert_allclose(out["z"][1:], beta[1:] * a[np.arange(1, B), s[1:]], **TOL)  # Eq. 8-9
    np.testing.assert_allclose(out["log_p_sample"], np.log(alpha[np.arange(B), s]), **TOL)
    entropy = -(alpha * np.log(alpha)).sum(-1)
    np.testing.assert_allclose(out["entropy"], entropy, **TOL)


def test_hard_attention_samples_follow_alpha_and_reproduce_from_a_seed():
    def draws(seed):
        layer = HardAttention(A, seed=seed)
        layer.build(D, N)
        randomise(layer, scale=0.8)
        a, h, _ = inputs()
        a, h = np.repeat(a[:1], 4000, 0), np.repeat(h[:1], 4000, 0)
        out = layer(a, layer.project(a), h, training=True)
        return out["sample"].numpy(), out["alpha"].numpy()[0]

    s1, alpha = draws(5)
    s2, _ = draws(5)
    s3, _ = draws(6)
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, s3)
    frequency = np.bincount(s1, minlength=L) / len(s1)
    np.testing.assert_allclose(frequency, alpha, atol=0.03)  # Multinoulli(alpha)


def build_decoder(attention="soft", **kwargs):
    decoder = LSTMDecoder(K, M, N, A, attention=attention, dropout=0.0, seed=2, **kwargs)
    decoder.build(D)
    randomise(decoder)
    return decoder


def test_decoder_teacher_forcing_matches_equations_1_to_7():
    decoder = build_decoder()
    a, _, ids = inputs()
    out = decoder(a, ids, training=False)
    expected = ref.decoder(a.astype(np.float64), ids, ref.decoder_weights(decoder))
    np.testing.assert_allclose(out["logits"], expected["logits"], **TOL)
    np.testing.assert_allclose(out["alphas"], expected["alphas"], **TOL)
    np.testing.assert_allclose(out["betas"], expected["betas"], **TOL)


def test_initial_state_and_single_step_match_the_reference():
    decoder = build_decoder()
    a, _, ids = inputs()
    w = ref.decoder_weights(decoder)
    h0, c0 = decoder.initial_state(a)
    mean = a.astype(np.float64).mean(1)
    np.testing.assert_allclose(h0, np.tanh(mean @ w["Wih"] + w["bih"]), **TOL)
    np.testing.assert_allclose(c0, np.tanh(mean @ w["Wic"] + w["bic"]), **TOL)
    logits, state = decoder.step(ids[:, 0], {"h": h0, "c": c0}, a, decoder.attention.project(a))
    expected = ref.decoder(a.astype(np.float64), ids[:, :1], w)
    np.testing.assert_allclose(logits, expected["logits"][:, 0], **TOL)
    np.testing.assert_allclose(state["h"], expected["h"][:, 0], **TOL)
    np.testing.assert_allclose(state["c"], expected["c"][:, 0], **TOL)
    np.testing.assert_allclose(state["alpha"], expected["alphas"][:, 0], **TOL)


def test_hard_decoder_teacher_forcing_matches_reference_with_its_samples():
    decoder = build_decoder("hard", attention_options={"hard_soft_probability": 0.5})
    a, _, ids = inputs()
    a = np.repeat(a, 4, axis=0)  # enough rows that both kinds occur
    ids = np.repeat(ids, 4, axis=0)
    out = decoder(a, ids, training=True)
    use_expectation = out["use_expectation"].numpy()
    assert use_expectation.any() and not use_expectation.all()
    expected = ref.decoder(
        a.astype(np.float64),
        ids,
        ref.decoder_weights(decoder),
        out["samples"].numpy(),
        use_expectation,
    )
    np.testing.assert_allclose(out["logits"], expected["logits"], **TOL)
    log_alpha = np.log(
        np.take_along_axis(expected["alphas"], out["samples"].numpy()[..., None], -1)[..., 0]
    )
    np.testing.assert_allclose(out["log_p_samples"], log_alpha, **TOL)


def test_doubly_stochastic_penalty_and_masked_nll():
    rng = np.random.default_rng(4)
    alphas = ref.softmax(rng.normal(size=(B, T, L)))
    logits = rng.normal(size=(B, T, K))
    targets = rng.integers(1, K, size=(B, T))
    lengths = np.array([T, 3, 1])
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.float64)
    targets = np.where(mask > 0, targets, 0)
    got = losses.doubly_stochastic_penalty(alphas.astype("float32"), mask.astype("float32"))
    np.testing.assert_allclose(got, ref.doubly_stochastic_penalty(alphas, mask), **TOL)
    log_p = np.take_along_axis(ref.log_softmax(logits), targets[..., None], -1)[..., 0]
    got = losses.sequence_log_likelihood(logits.astype("float32"), targets, mask.astype("float32"))
    np.testing.assert_allclose(got, (log_p * mask).sum(1), **TOL)


def test_caption_loss_masks_padding_and_reports_per_token_nll():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(2, 4, K)).astype("float32")
    alphas = ref.softmax(rng.normal(size=(2, 4, L))).astype("float32")
    tokens = np.array([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]], np.int32)  # <start> .. <end> <pad>
    terms = losses.caption_loss(
        {"logits": logits, "alphas": alphas}, tokens, doubly_stochastic_lambda=0.5
    )
    mask = (tokens[:, 1:] != 0).astype(np.float64)
    log_p = np.take_along_axis(ref.log_softmax(logits.astype(np.float64)), tokens[:, 1:, None], -1)[
        ..., 0
    ]
    per_caption = -(log_p * mask).sum(1) + 0.5 * ref.doubly_stochastic_penalty(alphas, mask)
    np.testing.assert_allclose(terms["loss"], per_caption.mean(), **TOL)
    np.testing.assert_allclose(terms["nll"], -(log_p * mask).sum() / mask.sum(), **TOL)


def test_reinforce_surrogate_gradient_is_the_paper_estimator():
    """d loss / d e equals -[lambda_r (log p(y) - b)(onehot(s) - alpha) + lambda_e dH/de] (Eq. 12)."""
    rng = np.random.default_rng(6)
    scores = rng.normal(size=(B, T, L))
    samples = rng.integers(0, L, size=(B, T))
    log_p_y = rng.normal(-5.0, 1.0, size=B)
    mask = np.ones((B, T))
    mask[2, 3:] = 0.0
    hard_rows = np.array([1.0, 1.0, 0.0])
    baseline, lambda_r, lambda_e = -4.0, 0.7, 0.05
    e = tf.Variable(scores.astype("float32"))
    with tf.GradientTape() as tape:
        log_alpha = tf.nn.log_softmax(e, axis=-1)
        alpha = tf.exp(log_alpha)
        log_p_samples = tf.gather(log_alpha, samples, batch_dims=2)
        entropies = -tf.reduce_sum(alpha * log_alpha, -1)
        surrogate = losses.reinforce_surrogate(
            tf.constant(log_p_y, tf.float32),
            log_p_samples,
            entropies,
            tf.constant(mask, tf.float32),
            tf.constant(hard_rows, tf.float32),
            baseline,
            lambda_r,
            lambda_e,
        )
        total = tf.reduce_sum(surrogate)
    grad = tape.gradient(total, e).numpy()
    alpha = ref.softmax(scores)
    one_hot = np.eye(L)[samples]
    entropy = -(alpha * np.log(alpha)).sum(-1, keepdims=True)
    d_entropy = -alpha * (np.log(alpha) + entropy)
    reward = (log_p_y - baseline)[:, None, None]
    expected = -(lambda_r * reward * (one_hot - alpha) + lambda_e * d_entropy)
    expected *= mask[:, :, None] * hard_rows[:, None, None]
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-5)
    assert np.abs(grad[2]).max() == 0.0  # rows that used the expectation get no REINFORCE term


def test_caption_loss_compares_each_caption_with_its_length_times_the_baseline():
    """d loss / d log p(s_t) = -lambda_r (log p(y|s,a) - n b) / B on sampled rows (Eq. 12)."""
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(3, 4, K)).astype("float32")
    alphas = ref.softmax(rng.normal(size=(3, 4, L))).astype("float32")
    tokens = np.array([[2, 5, 6, 7, 3], [2, 7, 3, 0, 0], [2, 5, 3, 0, 0]], np.int32)
    log_p_samples = tf.Variable(rng.normal(-2.0, 0.5, size=(3, 4)).astype("float32"))
    outputs = {
        "logits": logits,
        "alphas": alphas,
        "entropies": tf.zeros((3, 4)),
        "use_expectation": tf.constant([False, False, True]),
    }
    baseline, lambda_r = -1.5, 0.5
    with tf.GradientTape() as tape:
        terms = losses.caption_loss(
            {**outputs, "log_p_samples": log_p_samples * 1.0},
            tokens,
            baseline=baseline,
            reinforce_weight=lambda_r,
            attention=HardAttention,
        )
    grad = tape.gradient(terms["loss"], log_p_samples).numpy()
    mask = (tokens[:, 1:] != 0).astype(np.float64)
    log_p = np.take_along_axis(ref.log_softmax(logits.astype(np.float64)), tokens[:, 1:, None], -1)
    log_p_y = (log_p[..., 0] * mask).sum(1)
    lengths = mask.sum(1)
    expected = -lambda_r * (log_p_y - baseline * lengths)[:, None] * mask / 3
    expected[2] = 0.0  # the expected-context caption has no REINFORCE term
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(terms["log_p_per_word"], log_p_y / lengths, rtol=1e-5)


def test_expected_context_baseline_is_each_captions_own_likelihood():
    rng = np.random.default_rng(9)
    logits = rng.normal(size=(2, 3, K)).astype("float32")
    baseline_logits = rng.normal(size=(2, 3, K)).astype("float32")
    tokens = np.array([[2, 5, 6, 3], [2, 7, 3, 0]], np.int32)
    log_p_samples = tf.Variable(np.zeros((2, 3), np.float32))
    outputs = {
        "logits": logits,
        "alphas": ref.softmax(rng.normal(size=(2, 3, L))).astype("float32"),
        "entropies": tf.zeros((2, 3)),
        "use_expectation": tf.constant([False, False]),
        "baseline_logits": baseline_logits,
    }
    with tf.GradientTape() as tape:
        terms = losses.caption_loss(
            {**outputs, "log_p_samples": log_p_samples * 1.0},
            tokens,
            baseline=-100.0,
            attention=HardAttention,
        )
    grad = tape.gradient(terms["loss"], log_p_samples).numpy()
    mask = (tokens[:, 1:] != 0).astype(np.float64)

    def log_p(values):
        lp = np.take_along_axis(ref.log_softmax(values.astype(np.float64)), tokens[:, 1:, None], -1)
        return (lp[..., 0] * mask).sum(1)

    # The moving-average value (-100) is ignored: the reward is log p(y|s,a) - log p(y|E[s],a).
    expected = -(log_p(logits) - log_p(baseline_logits))[:, None] * mask / 2
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_caption_loss_value_excludes_the_surrogate_but_its_gradient_includes_it():
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(2, 3, K)).astype("float32")
    alphas = ref.softmax(rng.normal(size=(2, 3, L))).astype("float32")
    tokens = np.array([[2, 5, 6, 3], [2, 7, 3, 0]], np.int32)
    log_alpha = tf.Variable(np.log(alphas[..., 0]))
    outputs = {
        "logits": logits,
        "alphas": alphas,
        "log_p_samples": None,
        "entropies": tf.zeros((2, 3)),
        "use_expectation": tf.constant([False, False]),
    }
    with tf.GradientTape() as tape:
        outputs["log_p_samples"] = log_alpha * 1.0
        hard = losses.caption_loss(
            outputs, tokens, baseline=-1.0, reinforce_weight=1.0, attention=HardAttention
        )
    soft = losses.caption_loss({"logits": logits, "alphas": alphas}, tokens)
    np.testing.assert_allclose(hard["loss"], soft["loss"], rtol=1e-6)
    assert np.abs(tape.gradient(hard["loss"], log_alpha).numpy()).max() > 0
