"""The benchmark's two model sizes, their analytic FLOP count, and a model and batch of each."""

# The two sizes of the benchmark issue. attention_units (not fixed by the issue) = D.
SIZES = {
    "tutorial": dict(
        backbone="inceptionv3", locations=64, channels=2048, feature_dim=256,
        embedding_dim=256, lstm_units=512, attention_units=256, vocab=5001, length=20, batch=64,
    ),
    "paper": dict(
        backbone="vgg16", locations=196, channels=512, feature_dim=512,
        embedding_dim=512, lstm_units=1000, attention_units=512, vocab=10000, length=20, batch=64,
    ),
}  # fmt: skip


def forward_flops(size):
    """Multiply-adds x 2 of one teacher-forced forward pass over a batch.

    Per caption (L locations, C channels, D annotation size, A attention units,
    m embedding, n LSTM units, K vocabulary, T steps):
        squeeze        2 L C D             Dense(D) on every location
        W_a a          2 L D A             projected once per image
        f_init h, c    2 x 2 D n
        per step:
          W_h h        2 n A
          scores       3 L A               add, tanh (counted as 1), v^T
          context      2 L D               sum_i alpha_i a_i
          gate         2 n                 f_beta
          LSTM         2 (m + D + n) 4n    Eq. 1 (embedding part hoisted, same count)
          deep output  2 (n m + D m) + 2 m K   Eq. 7
    Element-wise work (softmax, gates' nonlinearities, the loss) is left out.
    """
    L, C, D = size["locations"], size["channels"], size["feature_dim"]
    A, m, n = size["attention_units"], size["embedding_dim"], size["lstm_units"]
    K, T = size["vocab"], size["length"]
    per_image = 2 * L * C * D + 2 * L * D * A + 4 * D * n
    per_step = (
        2 * n * A + 3 * L * A + 2 * L * D + 2 * n + 2 * (m + D + n) * 4 * n
        + 2 * (n * m + D * m) + 2 * m * K
    )  # fmt: skip
    return size["batch"] * (per_image + T * per_step)


def train_step_flops(size):
    """A training step: forward plus backward, counted as 3 x the forward (backward = 2 x)."""
    return 3 * forward_flops(size)


def captioner(size, attention, backbone=None, precision="float32"):
    from keras_saat import Captioner
    from keras_saat.runtime.precision import dtype_policy

    words = ["<pad>", "<unk>", "<start>", "<end>"] + [f"w{i}" for i in range(size["vocab"] - 4)]
    with dtype_policy(precision):
        return Captioner(
            words,
            backbone=backbone or size["backbone"],
            feature_dim=size["feature_dim"],
            embedding_dim=size["embedding_dim"],
            lstm_units=size["lstm_units"],
            attention_units=size["attention_units"],
            attention=attention,
            max_length=size["length"],
            seed=0,
        )


def random_batch(size, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    B, T = size["batch"], size["length"]
    tokens = rng.integers(4, size["vocab"], size=(B, T + 1)).astype("int32")
    tokens[:, 0] = 2  # <start>
    tokens[:, -1] = 3  # <end>: every caption is T tokens long, no padding
    features = rng.normal(size=(B, size["locations"], size["channels"])).astype("float32")
    return {"features": features, "tokens": tokens}


def train_setup(
    size, attention, xla, precision="float32", unroll=True, one_executable="auto", fused=None
):
    """The train and profile parts' Trainer (Adam, global-norm clip 5, loss scaling in
    float16) on a `captioner` of `size`, untraced, and a `random_batch` as tensors.
    `one_executable` and `fused` are the Trainer's `one_executable` and `fused_scores`."""
    import keras
    import tensorflow as tf

    from keras_saat.training.trainer import Trainer

    model = captioner(size, attention, precision=precision)
    optimizer = keras.optimizers.Adam(1e-4)
    if precision == "float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = Trainer(
        model, optimizer, clipnorm=5.0, jit_compile=xla, log=lambda _: None, unroll=unroll,
        one_executable=one_executable, fused_scores=fused,
    )  # fmt: skip
    return trainer, {k: tf.constant(v) for k, v in random_batch(size).items()}
