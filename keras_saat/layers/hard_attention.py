"""HardAttention: stochastic attention trained with REINFORCE (Eq. 8-12)."""

import keras
from keras import ops

from keras_saat.layers.soft_attention import SoftAttention, attend_options


@keras.saving.register_keras_serializable(package="keras_saat")
class HardAttention(SoftAttention):
    """s_t ~ Multinoulli_L(alpha_t), z_t = a_{s_t} (Eq. 8-9).

    In training, locations are drawn with a stateless sampler (reproducible under XLA,
    checkpointed with the layer). A caption uses the expected context instead with
    probability `hard_soft_probability` (the variance reduction of Sec. 4.1); inference
    uses the expected context. The gating scalar multiplies either, as in arctic-captions.

    Args:
        units: int. Width of the attention MLP. Defaults to 128.
        gating: bool. Use the gating scalar beta. Defaults to True.
        seed: int or None. Sampler seed (the per-caption draw uses seed + 1). Defaults to None.
        hard_soft_probability: float. Probability that a caption uses the expected context
            instead of samples. Defaults to 0.5.

    `Captioner(..., attention="hard")` builds it; `fit()` then adds REINFORCE against the
    moving-average baseline (Eq. 12).
    """

    options = ("hard_soft_probability",)
    reinforce = True
    # The paper's doubly stochastic regulariser belongs to deterministic attention (Sec.
    # 4.2.1); on hard attention it spreads alpha over the scene.
    doubly_stochastic_lambda = 0.0

    def __init__(self, units=128, gating=True, seed=None, hard_soft_probability=0.5, **kwargs):
        super().__init__(units=units, gating=gating, seed=seed, **kwargs)
        self.hard_soft_probability = float(hard_soft_probability)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.mix_seed_generator = keras.random.SeedGenerator(None if seed is None else seed + 1)

    def context_count(self, training=False):
        """Weightings of the annotations per step: alpha, and in training the one-hot sample."""
        return 2 if training else 1

    def begin(self, batch_size, training=False):
        """In training, which captions use the expected context: {"use_expectation": (B,) bool}."""
        if not training:
            return {}
        draw = keras.random.uniform((batch_size,), seed=self.mix_seed_generator)
        return {"use_expectation": draw < self.hard_soft_probability}

    def sequence_outputs(self, steps, begun):
        """samples, log_p_samples and entropies (B, T), and use_expectation (B,)."""
        use_expectation = begun.get("use_expectation")
        if use_expectation is None:  # inference: every caption used the expectation
            use_expectation = ops.ones((ops.shape(steps["sample"])[0],), "bool")
        return {
            "samples": steps["sample"],
            "log_p_samples": steps["log_p_sample"],
            "entropies": steps["entropy"],
            "use_expectation": use_expectation,
        }

    @classmethod
    def policy_terms(cls, outputs):
        """log alpha of the drawn locations, the entropies, and the rows that used draws."""
        rows = 1.0 - ops.cast(outputs["use_expectation"], "float32")
        return {"log_p": outputs["log_p_samples"], "entropy": outputs["entropies"], "rows": rows}

    def call(
        self,
        annotations,
        projected,
        hidden,
        training=False,
        use_expectation=None,
        query=None,
        gate_input=None,
        context_matmuls=None,
        step_scores=None,
        score_kernel=None,
    ):
        """Returns dict(z, alpha, beta, sample (B,) int32, log_p_sample (B,), entropy (B,)); the
        other arguments are as in `SoftAttention.call`."""
        given = attend_options(step_scores, score_kernel)
        alpha = self.attend(projected, hidden, query, **given)  # (B, L)
        beta = self.gate_value(hidden, gate_input)  # (B, 1)
        # The policy's log-probabilities and entropy in float32 (also under mixed precision).
        alpha32 = ops.cast(alpha, "float32")
        log_alpha = ops.log(ops.maximum(alpha32, 1e-12))
        entropy = -ops.sum(alpha32 * log_alpha, axis=-1)  # (B,)
        matmuls = context_matmuls or [None, None]
        expected = self.context(alpha, annotations, matmuls[0])  # (B, D)
        if training:
            sample = ops.cast(
                keras.random.categorical(log_alpha, 1, seed=self.seed_generator)[:, 0], "int32"
            )  # (B,)
            one_hot = ops.one_hot(sample, ops.shape(alpha)[-1], dtype=alpha.dtype)  # (B, L)
            # Two (B, 1, L) x (B, L, D) matmuls, each stacked over the steps by the decoder.
            z = self.context(one_hot, annotations, matmuls[1])  # a_{s_t}: (B, D)
            if use_expectation is not None:
                z = ops.where(use_expectation[:, None], expected, z)
            log_p_sample = ops.sum(ops.cast(one_hot, "float32") * log_alpha, axis=-1)  # (B,)
        else:  # the expected context; the sample is alpha's mode
            sample = ops.cast(ops.argmax(alpha, axis=-1), "int32")
            z = expected
            log_p_sample = ops.take_along_axis(log_alpha, sample[:, None], 1)[:, 0]
        return {
            "z": beta * z,
            "alpha": alpha,
            "beta": beta,
            "sample": sample,
            "log_p_sample": log_p_sample,
            "entropy": entropy,
        }

    def get_config(self):
        config = super().get_config()
        config.update(hard_soft_probability=self.hard_soft_probability)
        return config
