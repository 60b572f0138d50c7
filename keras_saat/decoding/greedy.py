"""In-graph greedy decoding over a next-token function."""

import tensorflow as tf


def greedy_search(next_fn, initial_state, start_ids, end_id, max_length, pad_id=0, record=()):
    """Decodes by taking the most probable token at every step.

    One `tf.while_loop` with fixed-size TensorArrays (XLA compiles it); it stops when every
    caption has produced `end_id`, or at `max_length` tokens.

    Args:
        next_fn: callable(tokens (B,) int32, state) -> (logits (B, K), state). `state` is a
            dict of tensors with a fixed shape.
        initial_state: dict. The state before the first step, holding every key of `record`.
        start_ids: (B,) int32. The first input tokens.
        end_id: int. The end token; decoding a caption stops after it.
        max_length: int. Maximum number of generated tokens, `end_id` included.
        pad_id: int. Written after a caption has ended. Defaults to 0.
        record: tuple of str. State keys to collect at every step (e.g. "alpha"). Defaults to ().

    Returns:
        dict: tokens (B, max_length) int32 (the end token included, pad_id after it),
        lengths (B,) int32 (end included), log_prob (B,) float32 (summed over the chosen
        tokens), and each recorded key as (B, max_length, ...), zeros after the end.
    """
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    batch = tf.shape(start_ids)[0]

    def steps_of(value):  # a (B, ...) value at every step
        return tf.TensorArray(value.dtype, size=max_length, element_shape=value.shape)

    token_array = steps_of(start_ids)
    arrays = {key: steps_of(initial_state[key]) for key in record}

    def cond(step, tokens, state, finished, log_prob, lengths, token_array, arrays):
        return tf.logical_not(tf.reduce_all(finished))

    def body(step, tokens, state, finished, log_prob, lengths, token_array, arrays):
        logits, state = next_fn(tokens, state)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)  # (B, K)
        best = tf.argmax(log_probs, axis=-1, output_type=tf.int32)  # (B,)
        best_log_prob = tf.gather(log_probs, best, batch_dims=1)  # (B,)
        tokens = tf.where(finished, pad_id, best)
        alive = tf.logical_not(finished)
        log_prob += tf.where(alive, best_log_prob, 0.0)
        lengths += tf.cast(alive, tf.int32)
        token_array = token_array.write(step, tokens)
        arrays = {
            key: array.write(step, _zero_where_done(alive, state[key]))
            for key, array in arrays.items()
        }
        finished = tf.logical_or(finished, tf.equal(tokens, end_id))
        return step + 1, tokens, state, finished, log_prob, lengths, token_array, arrays

    loop_vars = (
        tf.constant(0),
        start_ids,
        initial_state,
        tf.zeros([batch], tf.bool),
        tf.zeros([batch], tf.float32),
        tf.zeros([batch], tf.int32),
        token_array,
        arrays,
    )
    _, _, _, _, log_prob, lengths, token_array, arrays = tf.while_loop(
        cond, body, loop_vars, maximum_iterations=max_length
    )
    # Unwritten steps (all captions ended early) stack as zeros; make them pad_id.
    tokens = tf.transpose(token_array.stack(), [1, 0])  # (B, T)
    tokens = tf.where(tf.range(max_length)[None, :] < lengths[:, None], tokens, pad_id)
    out = {"tokens": tokens, "lengths": lengths, "log_prob": log_prob}
    for key, array in arrays.items():
        stacked = array.stack()  # (T, B, ...)
        out[key] = tf.transpose(stacked, [1, 0, *range(2, stacked.shape.rank)])
    return out


def _zero_where_done(alive, value):
    """(B, ...) `value` with the rows of ended captions zeroed."""
    mask = tf.reshape(alive, [-1] + [1] * (value.shape.rank - 1))
    return tf.where(mask, value, tf.zeros_like(value))
