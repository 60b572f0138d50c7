"""LSTMDecoder: the attention LSTM with the deep output layer (Eq. 1-3, 7)."""

import itertools

import keras
from keras import ops

from keras_saat.layers.attention_registry import get_attention
from keras_saat.layers.stacked_matmul import StepMatmuls
from keras_saat.layers.teacher_forcing_loop import teacher_forcing_loop


def _forget_bias_one(shape, dtype=None):
    units = shape[0] // 4
    return ops.concatenate(
        [ops.zeros((units,), dtype), ops.ones((units,), dtype), ops.zeros((2 * units,), dtype)]
    )


@keras.saving.register_keras_serializable(package="keras_saat")
def _scores_as_built(attention):
    """Whether `attention` scores with SoftAttention's own Eq. 4 (its `attend`, `call` and
    `score` layer), so the decoder may hand it fused scores or the score kernel."""
    from keras_saat.layers.hard_attention import HardAttention
    from keras_saat.layers.soft_attention import SoftAttention

    kind = type(attention)
    return (
        getattr(attention, "score", None) is not None
        and kind.attend is SoftAttention.attend
        and kind.call in (SoftAttention.call, HardAttention.call)
    )


class LSTMDecoder(keras.layers.Layer):
    """Generates a caption word by word while attending over the annotations.

    For t = 1..T, with h_0, c_0 = f_init_h(mean_i a_i), f_init_c(mean_i a_i) (Sec. 3.1.2):
        z_t      = attention(a, h_{t-1})                          (Eq. 4-6 or 8-9, 13)
        i, f, g, o = sigmoid/tanh(W [E y_{t-1}, z_t] + U h_{t-1} + b)   (Eq. 1, gates in Keras order)
        c_t = f * c_{t-1} + i * g;  h_t = o * tanh(c_t)            (Eq. 2-3)
        logits_t = L_o(dropout(E y_{t-1} + L_h h_t + L_z z_t))     (Eq. 7, the deep output layer)

    Teacher forcing (`call`) runs unrolled (faster steps) or as one `tf.while_loop` (a graph
    and compile that do not grow with T), with the same values. `step` advances one word
    for the decoders in `keras_saat.decoding`.

    Args:
        vocab_size: int. K, number of tokens.
        embedding_dim: int. m, word embedding size. Defaults to 64.
        lstm_units: int. n, LSTM size. Defaults to 256.
        attention_units: int. Width of the attention MLP. Defaults to 128.
        attention: str. A name in `keras_saat.layers.attention_registry` ("soft", "hard").
            Defaults to "soft".
        gating: bool. Use the gating scalar beta. Defaults to True.
        dropout: float. Dropout rate before L_o. Defaults to 0.5.
        attention_options: dict or None. Extra constructor arguments of the attention
            type (its `options`, e.g. hard attention's hard_soft_probability). Defaults to None.
        seed: int or None. Seed for dropout and the attention's draws. Defaults to None.
        unroll: bool. Teacher forcing unrolled (True) or as a `tf.while_loop` (False); it
            may change on a built layer. Defaults to True.
        fused_scores: bool. Eq. 4's scores fused with a custom gradient (`StepScores`,
            `LoopScores`): no (B, L, units) tensor kept per step; may change like `unroll`.
            Defaults to False.

    Example:
        ```python
        import numpy as np
        from keras_saat.layers import LSTMDecoder

        decoder = LSTMDecoder(vocab_size=100, lstm_units=64, attention="soft")
        decoder.build(16)  # D, the annotation size
        annotations = np.random.rand(2, 64, 16).astype("float32")
        tokens = np.ones((2, 12), "int32")  # <start> and the words, teacher-forced
        outputs = decoder(annotations, tokens)  # outputs["logits"]: (2, 12, 100)
        ```
    """

    def __init__(
        self,
        vocab_size,
        embedding_dim=64,
        lstm_units=256,
        attention_units=128,
        attention="soft",
        gating=True,
        dropout=0.5,
        attention_options=None,
        seed=None,
        unroll=True,
        fused_scores=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        attention_class = get_attention(attention)
        self.vocab_size = int(vocab_size)
        self.embedding_dim = int(embedding_dim)
        self.lstm_units = int(lstm_units)
        self.attention_units = int(attention_units)
        self.attention_name = attention
        self.gating = bool(gating)
        self.dropout = float(dropout)
        self.attention_options = dict(attention_options or {})
        self.seed = seed
        self.unroll = bool(unroll)
        self.fused_scores = bool(fused_scores)
        self.embedding = keras.layers.Embedding(self.vocab_size, self.embedding_dim, name="E")
        self.attention = attention_class(
            attention_units, gating, seed=seed, name="attention", **self.attention_options
        )
        self.init_h = keras.layers.Dense(self.lstm_units, activation="tanh", name="f_init_h")
        self.init_c = keras.layers.Dense(self.lstm_units, activation="tanh", name="f_init_c")
        self.output_hidden = keras.layers.Dense(self.embedding_dim, name="L_h")
        self.output_context = keras.layers.Dense(self.embedding_dim, use_bias=False, name="L_z")
        self.output_logits = keras.layers.Dense(self.vocab_size, name="L_o")
        self.output_dropout = keras.layers.Dropout(self.dropout, seed=seed)

    def build(self, annotation_dim):
        n, m = self.lstm_units, self.embedding_dim
        self.annotation_dim = int(annotation_dim)
        self.embedding.build((None,))
        self.attention.build(annotation_dim, n)
        self.init_h.build((None, annotation_dim))
        self.init_c.build((None, annotation_dim))
        # W of Eq. 1 split by input: the embedding part is applied to all steps at once.
        self.lstm_embedding_kernel = self.add_weight(
            shape=(m, 4 * n), initializer="glorot_uniform", name="lstm_embedding_kernel"
        )
        self.lstm_context_kernel = self.add_weight(
            shape=(annotation_dim, 4 * n), initializer="glorot_uniform", name="lstm_context_kernel"
        )
        self.lstm_recurrent_kernel = self.add_weight(
            shape=(n, 4 * n), initializer="orthogonal", name="lstm_recurrent_kernel"
        )
        self.lstm_bias = self.add_weight(
            shape=(4 * n,), initializer=_forget_bias_one, name="lstm_bias"
        )
        self.output_hidden.build((None, n))
        self.output_context.build((None, annotation_dim))
        self.output_logits.build((None, m))
        self.built = True

    def initial_state(self, annotations):
        """h_0, c_0 from the mean annotation (Sec. 3.1.2): each (batch, n)."""
        mean = ops.mean(annotations, axis=1)  # (B, D)
        return self.init_h(mean), self.init_c(mean)

    def lstm(self, embedding_gates, z, h, c, context=None, recurrent=None):
        """One LSTM update (Eq. 1-3). `embedding_gates` is E y_{t-1} @ W_e: (batch, 4n);
        `context` (z @ W_z) and `recurrent` (h @ U) are computed here unless given."""
        dtype = h.dtype  # the compute dtype (float16 under mixed precision, also outside __call__)
        if context is None:
            context = ops.matmul(z, ops.cast(self.lstm_context_kernel, dtype))
        if recurrent is None:
            recurrent = ops.matmul(h, ops.cast(self.lstm_recurrent_kernel, dtype))
        gates = (
            ops.cast(embedding_gates, dtype) + context + recurrent + ops.cast(self.lstm_bias, dtype)
        )  # (B, 4n)
        i, f, g, o = ops.split(gates, 4, axis=-1)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h = ops.sigmoid(o) * ops.tanh(c)
        return h, c

    def deep_output(self, embedded, h, z, training=False, context=None):
        """Eq. 7 logits: (..., m), (..., n), (..., D) -> (..., K); `context` is L_z z if computed."""
        if context is None:
            context = self.output_context(z)
        out = embedded + self.output_hidden(h) + context
        return self.output_logits(self.output_dropout(out, training=training))

    def call(self, annotations, input_ids, training=False, repeats=None):
        """Teacher forcing over a static length T.

        Args:
            annotations: (batch, L, D) float, or (n, L, D) with `repeats`.
            input_ids: (batch, T) int. `<start> w_1 .. w_{T-1}`, the previous word at each step.
            training: bool. Dropout, and hard attention samples, only when True.
            repeats: k, when `input_ids` holds each image's k captions in a row (batch = n * k):
                W_a a and the initial state are computed once per image, then repeated.

        Returns:
            dict: logits (B, T, K), alphas (B, T, L), betas (B, T), and the attention type's
            `sequence_outputs`.
        """
        steps = input_ids.shape[1]
        embedded = self.embedding(input_ids)  # (B, T, m)
        embedding_gates = ops.matmul(embedded, self.lstm_embedding_kernel)  # (B, T, 4n)
        annotated = self.annotated(annotations, repeats)
        if not self.unroll:
            return self._loop(annotated, embedded, embedding_gates, training)
        # One unstack: the gradient of T slices `[:, t]` is T zero-padded tensors summed.
        step_gates = ops.unstack(embedding_gates, steps, axis=1)  # T x (B, 4n)
        annotations, projected, h, c = annotated
        batch_size = ops.shape(annotations)[0]
        begun = self.attention.begin(batch_size, training)  # per-caption draws
        # h_{t-1} meets all its kernels in one matmul per step; each kernel's gradient,
        # and the context's over the annotations, is one matmul over the stacked steps.
        kernels = self.hidden_kernels(h.dtype)
        hidden_matmul = StepMatmuls(kernels["hidden"], steps, [batch_size])
        context_kernel = ops.cast(self.lstm_context_kernel, h.dtype)
        context_matmul = StepMatmuls(context_kernel, steps, [batch_size])
        context_matmuls = [
            StepMatmuls(annotations, steps, [batch_size, 1])
            for _ in range(self.attention.context_count(training))
        ]
        # Eq. 4 fused only for the library's own scoring; d(W_a a) and dv summed once.
        fuse = self.fused_scores and _scores_as_built(self.attention)
        scores = {"step_scores": self.attention.step_scores(projected, steps)} if fuse else {}
        collected = {}
        for t in range(steps):
            recurrent, products = self.split_hidden(hidden_matmul(h), kernels)
            att = self.attention(
                annotations,
                projected,
                h,
                training=training,
                context_matmuls=context_matmuls,
                **scores,
                **begun,
                **products,
            )
            h, c = self.lstm(step_gates[t], att["z"], h, c, context_matmul(att["z"]), recurrent)
            for key, value in (("h", h), *att.items()):
                collected.setdefault(key, []).append(value)
        stacked = {k: ops.stack(v, axis=1) for k, v in collected.items()}  # (B, T, ...)
        return self._outputs(embedded, stacked, begun, training)

    def annotated(self, annotations, repeats=None):
        """(annotations, W_a a, h_0, c_0), one row per caption; with `repeats`, W_a a and the
        initial state are computed once per image, then repeated."""
        projected = self.attention.project(annotations)  # (B, L, units), once per image
        h, c = self.initial_state(annotations)
        if repeats is None:
            return annotations, projected, h, c
        return tuple(ops.repeat(x, repeats, axis=0) for x in (annotations, projected, h, c))

    def _loop(self, annotated, embedded, embedding_gates, training):
        """Teacher forcing as one `tf.while_loop` (keras_saat/layers/teacher_forcing_loop.py)."""
        scores, fused = {}, False
        if _scores_as_built(self.attention):
            scores = {"score_kernel": ops.cast(self.attention.score.kernel, annotated[2].dtype)}
            fused = self.fused_scores
        stacked, begun = teacher_forcing_loop(
            self, annotated, embedding_gates, training, scores, fused
        )  # fmt: skip
        return self._outputs(embedded, stacked, begun, training)

    def _outputs(self, embedded, stacked, begun, training):
        """The decoder's outputs from the stacked steps (B, T, ...) of either form."""
        logits = self.deep_output(embedded, stacked["h"], stacked["z"], training)  # (B, T, K)
        extra = {k: v for k, v in stacked.items() if k not in ("h", "z", "alpha", "beta")}
        return {
            "logits": logits,
            "alphas": stacked["alpha"],
            "betas": stacked["beta"][..., 0],
            **self.attention.sequence_outputs(extra, begun),
        }

    def step_kernels(self, dtype=None):
        """The kernels `step` multiplies by, concatenated by input, once per decode: "hidden"
        (n, 4n + ...) and "context" (D, 4n + m) in the compute dtype, and their split points."""
        dtype = dtype or self.compute_dtype
        context = [self.lstm_context_kernel, self.output_context.kernel]
        return {
            **self.hidden_kernels(dtype),
            "context": ops.concatenate([ops.cast(k, dtype) for k in context], axis=1),
            "context_split": [4 * self.lstm_units],
        }

    def hidden_kernels(self, dtype):
        """U and the attention's hidden kernels, which all multiply h_{t-1}, concatenated:
        "hidden", its split points "hidden_split" and argument names "hidden_names"."""
        attention_kernels = self.attention.hidden_kernels()  # {call argument: kernel}
        hidden = [self.lstm_recurrent_kernel, *attention_kernels.values()]
        return {
            "hidden": ops.concatenate([ops.cast(k, dtype) for k in hidden], axis=1),
            "hidden_split": list(itertools.accumulate(int(k.shape[1]) for k in hidden))[:-1],
            "hidden_names": list(attention_kernels),
        }

    @staticmethod
    def split_hidden(product, kernels):
        """h_{t-1} @ kernels["hidden"] -> (U h_{t-1}, {attention argument: product})."""
        recurrent, *parts = ops.split(product, kernels["hidden_split"], axis=-1)
        return recurrent, dict(zip(kernels["hidden_names"], parts, strict=True))

    def step(self, input_ids, state, annotations, projected, kernels=None):
        """One inference step: (batch,) previous ids -> (logits (B, K), new state). `state`
        holds h and c, the new one also the step's alpha (B, L); `kernels`: `step_kernels()`."""
        embedded = self.embedding(input_ids)  # (B, m)
        dtype = embedded.dtype
        kernels = kernels or self.step_kernels(dtype)
        recurrent, products = self.split_hidden(ops.matmul(state["h"], kernels["hidden"]), kernels)
        att = self.attention(annotations, projected, state["h"], training=False, **products)
        context, output_context = ops.split(
            ops.matmul(att["z"], kernels["context"]), kernels["context_split"], axis=-1
        )
        embedding_gates = ops.matmul(embedded, ops.cast(self.lstm_embedding_kernel, dtype))
        h, c = self.lstm(embedding_gates, att["z"], state["h"], state["c"], context, recurrent)
        logits = self.deep_output(embedded, h, att["z"], context=output_context)
        return logits, {"h": h, "c": c, "alpha": att["alpha"]}

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_dim=self.embedding_dim,
            lstm_units=self.lstm_units,
            attention_units=self.attention_units,
            attention=self.attention_name,
            gating=self.gating,
            dropout=self.dropout,
            attention_options=self.attention_options,
            seed=self.seed,
            unroll=self.unroll,
            fused_scores=self.fused_scores,
        )
        return config
