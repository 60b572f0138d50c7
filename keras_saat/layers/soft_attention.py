"""SoftAttention: deterministic attention with the gating scalar (Eq. 4-6, 13)."""

import keras
import tensorflow as tf
from keras import ops


def attend_options(step_scores, score_kernel):
    """`attend`'s optional arguments that are set, for types whose `attend` lacks them."""
    given = {"step_scores": step_scores, "score_kernel": score_kernel}
    return {k: v for k, v in given.items() if v is not None}


def _scores(energy, kernel):
    """energy @ v: (B, L, units), (units, 1) -> (B, L). Its gradient is a broadcast multiply:
    autodiff's d_scores v^T is a MatMul with inner dimension 1, which CPU kernels run slowly."""

    @tf.custom_gradient
    def scores(energy, kernel):
        flat = tf.reshape(energy, [-1, tf.shape(energy)[-1]])
        out = tf.reshape(tf.matmul(flat, kernel), tf.shape(energy)[:-1])

        def grad(d_scores):
            d_energy = d_scores[..., None] * tf.reshape(kernel, [-1])
            # From `energy`, which tanh's gradient keeps anyway, not from `flat`: in a
            # tf.while_loop each captured tensor is stacked over the iterations, once.
            rows = tf.reshape(energy, [-1, tf.shape(energy)[-1]])
            d_kernel = tf.matmul(rows, tf.reshape(d_scores, [-1, 1]), transpose_a=True)
            return d_energy, d_kernel

        return out, grad

    return scores(energy, kernel)


@keras.saving.register_keras_serializable(package="keras_saat")
class SoftAttention(keras.layers.Layer):
    """e_ti = v^T tanh(W_a a_i + W_h h_{t-1}); alpha_t = softmax_i(e_t); z_t = beta_t sum_i alpha_ti a_i.

    The gating scalar beta_t = sigmoid(f_beta(h_{t-1})) is one number per caption and step
    (Sec. 4.2.1). `project` computes `W_a a` once per image. It is also the base of every
    attention type in `keras_saat.layers.attention_registry`: callers ask the class what it
    adds (`options`, `reinforce`, `begin`, `sequence_outputs`, `policy_terms`).

    Args:
        units: int. Width of the attention MLP. Defaults to 128.
        gating: bool. Use the gating scalar beta (else beta = 1). Defaults to True.
        seed: int or None. Seed of the attention's random draws (none here). Defaults to None.

    Example:
        ```python
        import numpy as np
        from keras_saat.layers import SoftAttention

        attention = SoftAttention(units=32)
        attention.build(16, 48)  # D, the annotation size; n, the LSTM's
        annotations = np.random.rand(2, 64, 16).astype("float32")  # (batch, L, D)
        hidden = np.zeros((2, 48), "float32")  # h_{t-1}
        projected = attention.project(annotations)  # W_a a, once per image
        out = attention(annotations, projected, hidden)  # z (2, 16), alpha (2, 64), beta (2, 1)
        ```
    """

    # Captioner arguments (ModelConfig fields) this type's constructor also takes.
    options = ()
    # Whether the type samples its attention and so adds REINFORCE terms (Eq. 12) through
    # `policy_terms`, with the model's moving-average baseline following its captions.
    reinforce = False
    # The model's lambda of the doubly stochastic regulariser (Eq. 14) when none is given.
    doubly_stochastic_lambda = 1.0

    def __init__(self, units=128, gating=True, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.gating = bool(gating)
        self.seed = seed
        self.annotation_projection = keras.layers.Dense(self.units, name="W_a")
        self.hidden_projection = keras.layers.Dense(self.units, use_bias=False, name="W_h")
        self.score = keras.layers.Dense(1, use_bias=False, name="v")
        self.gate = keras.layers.Dense(1, name="f_beta") if self.gating else None

    def build(self, annotation_dim, hidden_dim):
        self.annotation_projection.build((None, None, annotation_dim))
        self.hidden_projection.build((None, hidden_dim))
        self.score.build((None, None, self.units))
        if self.gate is not None:
            self.gate.build((None, hidden_dim))
        self.built = True

    def project(self, annotations):
        """W_a a + b_a: (batch, L, D) -> (batch, L, units)."""
        return self.annotation_projection(annotations)

    def step_scores(self, projected, steps, loop=False):
        """A `StepScores` (or with `loop` a `LoopScores`) computing Eq. 4 fused over the steps."""
        from keras_saat.layers.attention_scores import LoopScores, StepScores

        kind = LoopScores if loop else StepScores
        return kind(projected, ops.cast(self.score.kernel, projected.dtype), steps)

    def hidden_kernels(self):
        """The kernels applied to h_{t-1}, by `call` argument: W_h as "query", f_beta's as
        "gate_input" when gating, so a decoder can multiply by them in one matmul."""
        kernels = {"query": self.hidden_projection.kernel}
        if self.gate is not None:
            kernels["gate_input"] = self.gate.kernel
        return kernels

    def attend(self, projected, hidden, query=None, step_scores=None, score_kernel=None):
        """Attention weights alpha_t (Eq. 4-5): (batch, L). `query` is W_h h_{t-1} when the
        caller has it; `step_scores` computes Eq. 4 fused; `score_kernel` is v in the compute
        dtype, read once outside a loop."""
        if query is None:
            query = self.hidden_projection(hidden)
        if step_scores is not None:
            scores = step_scores(query)  # (B, L), no (B, L, units) tensor kept
        else:
            energy = ops.tanh(projected + query[:, None, :])  # (B, L, units)
            if score_kernel is None:
                score_kernel = ops.cast(self.score.kernel, energy.dtype)
            scores = _scores(energy, score_kernel)  # (B, L)
        # The softmax in float32 under mixed precision; alpha comes back in the compute dtype.
        return ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), scores.dtype)

    def gate_value(self, hidden, gate_input=None):
        """beta_t (Eq. 13): (batch, 1), ones when gating is off; `gate_input` is h_{t-1} @ f_beta's
        kernel when the caller has it."""
        if self.gate is None:
            return ops.ones((ops.shape(hidden)[0], 1), hidden.dtype)
        if gate_input is None:
            return ops.sigmoid(self.gate(hidden))
        return ops.sigmoid(gate_input + ops.cast(self.gate.bias, gate_input.dtype))

    def context_count(self, training=False):
        """How many weightings of the annotations `call` sums per step: 1, alpha_t."""
        return 1

    def begin(self, batch_size, training=False):
        """Per-caption values drawn once per sequence and passed to every step's `call`."""
        return {}

    def sequence_outputs(self, steps, begun):
        """The decoder's outputs beyond logits, alphas and betas, from the stacked extra per-step
        values (B, T, ...) of `call` and what `begin` returned."""
        return {}

    @classmethod
    def policy_terms(cls, outputs):
        """For a `reinforce` type: dict(log_p (B, T) of the drawn attention, entropy (B, T),
        rows (B,) 1 where the caption used draws), read from the decoder's outputs."""
        raise NotImplementedError(f"{cls.__name__} adds no REINFORCE terms")

    @staticmethod
    def context(weights, annotations, context_matmul=None):
        """sum_i w_i a_i (Eq. 6 with w = alpha_t): (B, L), (B, L, D) -> (B, D), as a batched
        matmul (faster on CPU than the einsum), or by `context_matmul` (a `StepMatmuls`)."""
        if context_matmul is None:
            return ops.matmul(weights[:, None, :], annotations)[:, 0]
        return context_matmul(weights[:, None, :])[:, 0]

    def call(
        self,
        annotations,
        projected,
        hidden,
        training=False,
        query=None,
        gate_input=None,
        context_matmuls=None,
        step_scores=None,
        score_kernel=None,
    ):
        """Returns dict(z (B, D), alpha (B, L), beta (B, 1)). `query` and `gate_input` are
        h_{t-1}'s products with `hidden_kernels()`, `context_matmuls` `context_count()`
        functions for `context`, the rest as in `attend`; each None when not computed."""
        alpha = self.attend(projected, hidden, query, **attend_options(step_scores, score_kernel))
        matmuls = context_matmuls or [None]
        context = self.context(alpha, annotations, matmuls[0])  # (B, D), Eq. 6
        beta = self.gate_value(hidden, gate_input)
        return {"z": beta * context, "alpha": alpha, "beta": beta}

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, gating=self.gating, seed=self.seed)
        return config
