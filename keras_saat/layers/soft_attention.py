"""SoftAttention: deterministic attention with the gating scalar (Eq. 4-6, 13)."""

import keras
from keras import ops


def expected_context(alpha, annotations):
    """sum_i alpha_i a_i (Eq. 6): (batch, L), (batch, L, D) -> (batch, D).

    A batched (1, L) x (L, D) matmul. `einsum("bl,bld->bd")` computes the same, but on CPU
    it and its gradient run 2.5 x slower (347 against 135 ms for 20 steps at the paper's
    size, forward and backward; see benchmarks/RESULTS.md).
    """
    return ops.matmul(alpha[:, None, :], annotations)[:, 0, :]


@keras.saving.register_keras_serializable(package="keras_saat")
class SoftAttention(keras.layers.Layer):
    """e_ti = v^T tanh(W_a a_i + W_h h_{t-1}); alpha_t = softmax_i(e_t); z_t = beta_t sum_i alpha_ti a_i.

    The gating scalar beta_t = sigmoid(f_beta(h_{t-1})) is one number per caption
    and step (Sec. 4.2.1). `W_a a` does not depend on t: `project` computes it
    once per image and every step reuses it.

    Args:
        units: int. Width of the attention MLP. Defaults to 128.
        gating: bool. Use the gating scalar beta (else beta = 1). Defaults to True.
    """

    def __init__(self, units=128, gating=True, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.gating = bool(gating)
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

    def attend(self, projected, hidden):
        """Attention weights alpha_t (Eq. 4-5): (batch, L)."""
        energy = ops.tanh(projected + self.hidden_projection(hidden)[:, None, :])  # (B, L, units)
        scores = ops.squeeze(self.score(energy), -1)  # (B, L)
        return ops.softmax(scores, axis=-1)

    def gate_value(self, hidden):
        """beta_t (Eq. 13): (batch, 1); ones when gating is off."""
        if self.gate is None:
            return ops.ones((ops.shape(hidden)[0], 1), hidden.dtype)
        return ops.sigmoid(self.gate(hidden))

    def call(self, annotations, projected, hidden, training=False):
        """Returns dict(z (B, D), alpha (B, L), beta (B, 1))."""
        alpha = self.attend(projected, hidden)
        context = expected_context(alpha, annotations)  # (B, D), Eq. 6
        beta = self.gate_value(hidden)
        return {"z": beta * context, "alpha": alpha, "beta": beta}

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, gating=self.gating)
        return config
