"""Beam search over a next-token function, in the graph.

Batched over images and beams: the B x K hypotheses are one batch of B * K
rows (row b * K + k is beam k of image b) for `next_fn`. The loop is a
`tf.while_loop` whose loop variables all have fixed shapes (the token and
attention histories are (B, K, T, ...) tensors, re-ordered by the surviving
beams at each step), so it compiles with XLA. It stops as soon as every beam
of every image has produced the end token, or after `max_length` steps; a
hypothesis that never ends competes at full length.

A finished hypothesis stays in the beam: it extends only with `pad_id` at no
cost, so its score is frozen while the open ones compete with it. The beam
keeps the K best prefixes by summed log-probability; the final choice among
the K divides by length ** `length_penalty` (0 = the raw sum).
"""

import tensorflow as tf

NEG_INF = -1e9


def tile_beams(x, beam_size):
    """(B, ...) -> (B * K, ...), each row repeated K times (row b * K + k), for `next_fn`'s constants."""
    return tf.repeat(x, beam_size, axis=0)


def beam_search(
    next_fn,
    initial_state,
    start_ids,
    end_id,
    beam_size,
    max_length,
    pad_id=0,
    length_penalty=0.0,
    record=(),
):
    """Best hypothesis per image by beam search.

    Args:
        next_fn: callable(tokens (B*K,) int32, state) -> (logits (B*K, V), state). Tensors it
            closes over (e.g. annotations) must already be tiled with `tile_beams`.
        initial_state: dict of (B, ...) tensors; tiled to (B*K, ...) here.
        start_ids: (B,) int32. The first input token of every image.
        end_id: int. The token that ends a hypothesis (kept in the output).
        beam_size: int. K.
        max_length: int. Maximum tokens generated, the end token included.
        pad_id: int. Written after a hypothesis has ended. Defaults to 0.
        length_penalty: float. Final score = log p / length ** length_penalty. Defaults to 0.
        record: tuple of str. State keys to collect for the chosen hypothesis at every step
            (e.g. "alpha"). Defaults to ().

    Returns:
        dict: tokens (B, max_length) int32 (the end token included, pad_id after it),
        lengths (B,) int32, log_prob (B,) float32 (summed log-probabilities of the chosen
        tokens), score (B,) (the ranking score), and each recorded key as
        (B, max_length, ...) with zeros after the end.
    """
    k = int(beam_size)
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    batch = tf.shape(start_ids)[0]
    # Per-row state is tiled to the B*K hypotheses; scalars (e.g. a step counter) are shared.
    state = {key: _tile(value, k) for key, value in initial_state.items()}
    tokens = tile_beams(start_ids, k)  # (B*K,)
    # Only beam 0 is open at the start, so the first expansion does not repeat itself.
    scores = tf.tile(tf.constant([[0.0] + [NEG_INF] * (k - 1)], tf.float32), [batch, 1])  # (B, K)
    histories = tf.zeros([batch, k, max_length], tf.int32)
    recorded = {}
    for key in record:
        value = initial_state[key]
        recorded[key] = tf.zeros(
            tf.concat([[batch, k, max_length], tf.shape(value)[1:]], 0), value.dtype
        )

    def cond(step, tokens, state, scores, finished, lengths, histories, recorded):
        return tf.logical_not(tf.reduce_all(finished))

    def body(step, tokens, state, scores, finished, lengths, histories, recorded):
        logits, new_state = next_fn(tokens, state)
        vocab = tf.shape(logits)[-1]
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        log_probs = tf.reshape(log_probs, [batch, k, vocab])  # (B, K, V)
        # A finished hypothesis continues with pad only, at no cost.
        pad_only = tf.one_hot(pad_id, vocab, on_value=0.0, off_value=NEG_INF)  # (V,)
        log_probs = tf.where(finished[:, :, None], pad_only[None, None, :], log_probs)
        candidates = tf.reshape(scores[:, :, None] + log_probs, [batch, k * vocab])
        scores, flat = tf.math.top_k(candidates, k=k)  # (B, K)
        parent = flat // vocab  # (B, K): the beam each survivor extends
        token = flat % vocab  # (B, K)

        was_finished = tf.gather(finished, parent, batch_dims=1)
        finished = tf.logical_or(was_finished, tf.equal(token, end_id))
        lengths = tf.gather(lengths, parent, batch_dims=1) + tf.cast(
            tf.logical_not(was_finished), tf.int32
        )
        token = tf.where(was_finished, pad_id, token)
        at_step = tf.one_hot(step, max_length, dtype=tf.int32)  # (T,)
        histories = tf.gather(histories, parent, batch_dims=1) + token[:, :, None] * at_step

        rows = tf.reshape(parent + tf.range(batch)[:, None] * k, [-1])  # (B*K,) source rows
        state = {
            key: tf.ensure_shape(tf.gather(value, rows), value.shape) if value.shape.rank else value
            for key, value in new_state.items()
        }
        new_recorded = {}
        for key, history in recorded.items():
            value = tf.reshape(state[key], tf.concat([[batch, k], tf.shape(state[key])[1:]], 0))
            value = tf.where(_expand(was_finished, value), tf.zeros_like(value), value)
            mask = tf.one_hot(step, max_length, dtype=value.dtype)
            mask = tf.reshape(mask, [1, 1, max_length] + [1] * (len(value.shape) - 2))
            history = tf.gather(history, parent, batch_dims=1)
            new_recorded[key] = history + value[:, :, None] * mask
        tokens = tf.reshape(token, [-1])
        return step + 1, tokens, state, scores, finished, lengths, histories, new_recorded

    loop_vars = (
        tf.constant(0),
        tokens,
        state,
        scores,
        tf.zeros([batch, k], tf.bool),
        tf.zeros([batch, k], tf.int32),
        histories,
        recorded,
    )
    _, _, _, scores, _, lengths, histories, recorded = tf.while_loop(
        cond, body, loop_vars, maximum_iterations=max_length
    )
    ranked = scores
    if length_penalty:
        ranked = scores / tf.pow(tf.cast(tf.maximum(lengths, 1), tf.float32), length_penalty)
    best = tf.argmax(ranked, axis=1, output_type=tf.int32)  # (B,)
    out = {
        "tokens": tf.gather(histories, best, batch_dims=1),
        "lengths": tf.gather(lengths, best, batch_dims=1),
        "log_prob": tf.gather(scores, best, batch_dims=1),
        "score": tf.gather(ranked, best, batch_dims=1),
    }
    for key, history in recorded.items():
        out[key] = tf.gather(history, best, batch_dims=1)
    return out


def _tile(value, beam_size):
    value = tf.convert_to_tensor(value)
    return tile_beams(value, beam_size) if value.shape.rank else value


def _expand(mask, like):
    """(B, K) bool mask broadcastable against a (B, K, ...) tensor."""
    return tf.reshape(
        mask, tf.concat([tf.shape(mask), tf.ones([len(like.shape) - 2], tf.int32)], 0)
    )
