"""The training objective: masked NLL, the doubly stochastic regulariser, REINFORCE.

`fit()` and the custom training loop both call `caption_loss`, so they optimise and
report the same numbers. Per-caption sums over time are averaged over the batch, as in
the paper, so `lambda` keeps its published meaning.
"""

from keras import ops

from keras_saat.text.vocabulary import PAD_ID


def caption_rows(tokens):
    """1 where a token row holds a caption, 0 for a row of <pad> alone: (B, T + 1) -> (B,)."""
    return ops.cast(ops.any(ops.not_equal(tokens[:, 1:], PAD_ID), axis=1), "float32")


def sequence_log_likelihood(logits, targets, mask):
    """log p(y | a) summed over the caption's words: (B, T, K), (B, T), (B, T) -> (B,)."""
    nll = ops.sparse_categorical_crossentropy(targets, logits, from_logits=True)  # (B, T)
    return -ops.sum(nll * mask, axis=1)


def doubly_stochastic_penalty(alphas, mask):
    """sum_i (1 - sum_t alpha_ti)^2 over the caption's steps (Eq. 14): (B, T, L), (B, T) -> (B,)."""
    attention_total = ops.sum(alphas * mask[:, :, None], axis=1)  # (B, L)
    return ops.sum(ops.square(1.0 - attention_total), axis=-1)


def reinforce_surrogate(
    log_p_y, log_p_samples, entropies, mask, policy_rows, baseline, reinforce_weight, entropy_weight
):
    """A loss whose gradient is minus the REINFORCE terms of Eq. 12, per caption (B,).

    d/dW = -[lambda_r (log p(y|s,a) - b) d log p(s|a)/dW + lambda_e dH[s]/dW] on the
    `policy_rows`; the reward log p(y|s,a) - b is a constant (stop-gradient).

    Args:
        log_p_y: (B,) float. log p(y | s, a) of each caption.
        log_p_samples: (B, T) float. log alpha_{t, s_t} of the drawn locations.
        entropies: (B, T) float. H[alpha_t].
        mask: (B, T) float. 1 on the caption's steps.
        policy_rows: (B,) float. 1 where the caption used samples, 0 where it used expectations.
        baseline: scalar or (B,). The baseline b of each caption.
        reinforce_weight, entropy_weight: float. lambda_r and lambda_e.
    """
    reward = ops.stop_gradient(log_p_y - baseline)  # (B,)
    log_p_s = ops.sum(log_p_samples * mask, axis=1)  # log p(s | a): (B,)
    entropy = ops.sum(entropies * mask, axis=1)  # (B,)
    return -policy_rows * (reinforce_weight * reward * log_p_s + entropy_weight * entropy)


def caption_loss(
    outputs,
    tokens,
    doubly_stochastic_lambda=1.0,
    baseline=0.0,
    reinforce_weight=1.0,
    entropy_weight=0.0,
    attention=None,
):
    """The objective for one batch.

    Args:
        outputs: dict. `LSTMDecoder` outputs: logits, alphas, what the attention type adds,
            and optionally baseline_logits (the same captions under the expected context,
            the REINFORCE baseline).
        tokens: (B, T + 1) int. `<start> w_1 .. w_n <end> <pad>..`; the targets are tokens[:, 1:].
            A row of <pad> alone is no caption and weighs nothing (means are over captions).
        doubly_stochastic_lambda: float. lambda of Eq. 14. Defaults to 1.0.
        baseline: scalar. Hard attention's moving-average baseline, per word: a caption of n
            words is compared with n * baseline. Defaults to 0.0.
        reinforce_weight: float. lambda_r. Defaults to 1.0.
        entropy_weight: float. lambda_e. Defaults to 0.0.
        attention: the attention layer (or class) that produced `outputs`. A type that
            declares `reinforce` adds its REINFORCE terms (`policy_terms`); None adds none.
            Defaults to None.

    Returns:
        dict: loss (scalar to minimise: mean -log p(y|a) + lambda * penalty, its gradient
        holding the REINFORCE terms with hard attention), nll (per-token NLL), penalty
        (mean regulariser), log_p_y (B,) per-caption log-likelihood, log_p_per_word (B,)
        log_p_y over the caption's length (what the baseline tracks), policy_rows (B,) 1
        where the caption used sampled locations.
    """
    # The objective is computed in float32, also when the model runs in mixed precision.
    outputs = {
        k: ops.cast(v, "float32") if k in ("logits", "alphas", "baseline_logits") else v
        for k, v in outputs.items()
    }
    targets = tokens[:, 1:]
    mask = ops.cast(ops.not_equal(targets, PAD_ID), "float32")  # (B, T)
    captions = caption_rows(tokens)  # (B,): a row of <pad> alone weighs nothing
    caption_count = ops.maximum(ops.sum(captions), 1.0)
    log_p_y = sequence_log_likelihood(outputs["logits"], targets, mask)  # (B,)
    penalty = doubly_stochastic_penalty(outputs["alphas"], mask) * captions  # (B,)
    per_caption = -log_p_y + doubly_stochastic_lambda * penalty
    policy_rows = ops.zeros_like(log_p_y)
    if attention is not None and attention.reinforce:
        policy = {k: ops.cast(v, "float32") for k, v in attention.policy_terms(outputs).items()}
        policy_rows = policy["rows"] * captions
        # The baseline is per word, scaled by the caption's length: b may depend on y
        # (not on s), so the estimator stays unbiased, and the reward no longer varies
        # with how long a caption is.
        caption_baseline = ops.cast(baseline, "float32") * ops.sum(mask, axis=1)  # (B,)
        if "baseline_logits" in outputs:  # log p(y | a) with the expected context
            caption_baseline = sequence_log_likelihood(outputs["baseline_logits"], targets, mask)
        surrogate = reinforce_surrogate(
            log_p_y,
            policy["log_p"],
            policy["entropy"],
            mask,
            policy_rows,
            caption_baseline,
            reinforce_weight,
            entropy_weight,
        )
        # Adds the REINFORCE gradient while the reported loss stays the real objective.
        per_caption = per_caption + (surrogate - ops.stop_gradient(surrogate))
    return {
        "loss": ops.sum(per_caption) / caption_count,
        "nll": -ops.sum(log_p_y) / ops.maximum(ops.sum(mask), 1.0),
        "penalty": ops.sum(penalty) / caption_count,
        "log_p_y": log_p_y,
        "log_p_per_word": log_p_y / ops.maximum(ops.sum(mask, axis=1), 1.0),
        "policy_rows": policy_rows,
    }
