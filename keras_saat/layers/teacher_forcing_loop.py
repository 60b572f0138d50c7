"""Teacher forcing as one `tf.while_loop`: `LSTMDecoder`'s loop form (`unroll` False).

The matmuls by the hidden kernels, W_z and the context are `LoopMatmuls`, so each
kernel's gradient is one matmul after the loop rather than a product and sum in every
backward iteration; with `LoopScores`, each iteration records its query, not its
(B, L, A) energy.
"""

import tensorflow as tf
from keras import ops

from keras_saat.layers.stacked_matmul import LoopMatmuls


def teacher_forcing_loop(decoder, annotated, embedding_gates, training, scores, fused=False):
    """The decoder's T steps in one loop: (stacked, begun), the steps' values (B, T, ...) by
    name ("h" and what the attention returns) and what the attention's `begin` drew.

    The first step runs before the loop, so the TensorArrays take the dtypes and shapes of
    what the attention type returns. `annotated` is `decoder.annotated(...)`,
    `embedding_gates` (B, T, 4n) is E y_{t-1} @ W_e, `scores` holds extra arguments of the
    attention's `call` (the score kernel), and `fused` computes Eq. 4 with `LoopScores`.
    """
    steps = embedding_gates.shape[1] or ops.shape(embedding_gates)[1]
    gates = tf.TensorArray(embedding_gates.dtype, size=steps, clear_after_read=False)
    gates = gates.unstack(tf.transpose(embedding_gates, [1, 0, 2]))  # T x (B, 4n)
    annotations, projected, h, c = annotated
    attention = decoder.attention
    batch_size = ops.shape(annotations)[0]
    begun = attention.begin(batch_size, training)
    kernels = decoder.hidden_kernels(h.dtype)
    # Kernels read once, before the loop: a value made inside the body that the gradient
    # needs is stacked over the iterations, a captured one is not.
    hidden_matmul = LoopMatmuls(kernels["hidden"], steps, [batch_size])
    context_kernel = ops.cast(decoder.lstm_context_kernel, h.dtype)
    context_matmul = LoopMatmuls(context_kernel, steps, [batch_size])
    context_matmuls = [
        LoopMatmuls(annotations, steps, [batch_size, 1])
        for _ in range(attention.context_count(training))
    ]
    # Each iteration records the matmuls' inputs (and fused scores' queries) for the gradients.
    matmuls = [hidden_matmul, context_matmul, *context_matmuls]
    if fused:
        loop_scores = attention.step_scores(projected, steps, loop=True)
        matmuls.append(loop_scores)

    def advance(t, h, c):
        for matmul in matmuls:
            matmul.last_input = None
        extra = {"step_scores": loop_scores.at(t)} if fused else scores
        recurrent, products = decoder.split_hidden(hidden_matmul.at(t)(h), kernels)
        att = attention(
            annotations,
            projected,
            h,
            training=training,
            context_matmuls=[m.at(t) for m in context_matmuls],
            **extra,
            **begun,
            **products,
        )
        context = context_matmul.at(t)(att["z"])
        h, c = decoder.lstm(gates.read(t), att["z"], h, c, context, recurrent)
        # Each LoopMatmuls' x_t by its place (an attention type may not call them all).
        inputs = {i: m.last_input for i, m in enumerate(matmuls) if m.last_input is not None}
        return h, c, {"h": h, **att}, inputs

    def arrays_of(first):
        return {
            k: tf.TensorArray(v.dtype, size=steps, element_shape=v.shape).write(0, v)
            for k, v in first.items()
        }

    h, c, first, first_inputs = advance(0, h, c)
    arrays, input_arrays = arrays_of(first), arrays_of(first_inputs)

    def body(t, h, c, arrays, input_arrays):
        h, c, values, inputs = advance(t, h, c)
        written = [
            {k: a[k].write(t, v[k]) for k in a}
            for a, v in ((arrays, values), (input_arrays, inputs))
        ]
        return t + 1, h, c, *written

    _, _, _, arrays, input_arrays = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(1), h, c, arrays, input_arrays),
        maximum_iterations=steps - 1,
    )
    for i, array in input_arrays.items():
        matmuls[i].record(array.stack())  # (T, ...)
    stacked = {  # (T, B, ...) -> (B, T, ...)
        k: tf.transpose(a.stack(), [1, 0, *range(2, len(first[k].shape) + 1)])
        for k, a in arrays.items()
    }
    return stacked, begun
