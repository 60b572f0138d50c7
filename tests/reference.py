"""Plain NumPy (float64) implementations of the paper's equations, for golden tests."""

import numpy as np


def softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def attention_weights(layer):
    """The attention layer's parameters as float64 arrays."""
    w = {
        "Wa": layer.annotation_projection.kernel,
        "ba": layer.annotation_projection.bias,
        "Wh": layer.hidden_projection.kernel,
        "v": layer.score.kernel,
    }
    if layer.gate is not None:
        w.update(Wb=layer.gate.kernel, bb=layer.gate.bias)
    return {k: np.asarray(v, np.float64) for k, v in w.items()}


def soft_attention(a, h, w):
    """Eq. 4-6 and 13: alpha (B, L), beta (B, 1), z (B, D)."""
    projected = a @ w["Wa"] + w["ba"]  # (B, L, A)
    e = np.tanh(projected + (h @ w["Wh"])[:, None, :]) @ w["v"]  # (B, L, 1)
    alpha = softmax(e[..., 0])
    beta = sigmoid(h @ w["Wb"] + w["bb"]) if "Wb" in w else np.ones((len(h), 1))
    z = beta * np.einsum("bl,bld->bd", alpha, a)
    return alpha, beta, z


def decoder_weights(decoder):
    def arr(x):
        return np.asarray(x, np.float64)

    return {
        "E": arr(decoder.embedding.embeddings),
        "att": attention_weights(decoder.attention),
        "Wih": arr(decoder.init_h.kernel),
        "bih": arr(decoder.init_h.bias),
        "Wic": arr(decoder.init_c.kernel),
        "bic": arr(decoder.init_c.bias),
        "We": arr(decoder.lstm_embedding_kernel),
        "Wz": arr(decoder.lstm_context_kernel),
        "U": arr(decoder.lstm_recurrent_kernel),
        "b": arr(decoder.lstm_bias),
        "Lh": arr(decoder.output_hidden.kernel),
        "bLh": arr(decoder.output_hidden.bias),
        "Lz": arr(decoder.output_context.kernel),
        "Lo": arr(decoder.output_logits.kernel),
        "bLo": arr(decoder.output_logits.bias),
    }


def lstm(x, z, h, c, w):
    """Eq. 1-3 with the gates in Keras order i, f, g, o; x is E y_{t-1}."""
    gates = x @ w["We"] + z @ w["Wz"] + h @ w["U"] + w["b"]
    i, f, g, o = np.split(gates, 4, axis=-1)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    return h, c


def decoder(a, ids, w, samples=None, use_expectation=None):
    """Teacher-forced decoder without dropout.

    With `samples` (B, T) the hard-attention context a_{s_t} replaces the
    expectation on rows where `use_expectation` is False.
    """
    mean = a.mean(axis=1)
    h = np.tanh(mean @ w["Wih"] + w["bih"])
    c = np.tanh(mean @ w["Wic"] + w["bic"])
    out = {"logits": [], "alphas": [], "betas": [], "h": [], "c": []}
    for t in range(ids.shape[1]):
        x = w["E"][ids[:, t]]  # (B, m)
        alpha, beta, z = soft_attention(a, h, w["att"])
        if samples is not None:
            hard = beta * a[np.arange(len(a)), samples[:, t]]
            z = np.where(use_expectation[:, None], z, hard)
        h, c = lstm(x, z, h, c, w)
        logits = (x + h @ w["Lh"] + w["bLh"] + z @ w["Lz"]) @ w["Lo"] + w["bLo"]  # Eq. 7
        for key, value in (
            ("logits", logits),
            ("alphas", alpha),
            ("betas", beta[:, 0]),
            ("h", h),
            ("c", c),
        ):
            out[key].append(value)
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def doubly_stochastic_penalty(alphas, mask):
    """Eq. 14's sum_i (1 - sum_t alpha_ti)^2 per caption."""
    return ((1.0 - (alphas * mask[:, :, None]).sum(axis=1)) ** 2).sum(axis=-1)
