"""Beam search over a next-token function, in the graph.

The B x K alive hypotheses are one batch of B * K rows (row b * K + k is beam k of image
b). As in flax's WMT example, finished hypotheses are kept apart: each step takes the 2K
best extensions; those that end join a pool of the K best finished by log p / length **
`length_penalty`, and the K best open ones live on, so open ones never evict a finished
caption. One `tf.while_loop` with fixed shapes (XLA compiles it) stops when no alive
hypothesis can beat its image's worst finished one, or after `max_length` steps.
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
    """Best hypothesis per image by beam search, finished and alive hypotheses kept apart.

    Args:
        next_fn: callable(tokens (B*K,) int32, state) -> (logits (B*K, V), state). Tensors it
            closes over (e.g. annotations) must already be tiled with `tile_beams`.
        initial_state: dict of (B, ...) tensors; tiled to (B*K, ...) here.
        start_ids: (B,) int32. The first input token of every image.
        end_id: int. The token that ends a hypothesis (kept in the output).
        beam_size: int. K.
        max_length: int. Maximum tokens generated, the end token included.
        pad_id: int. Written after a hypothesis has ended. Defaults to 0.
        length_penalty: float, >= 0. Final score = log p / length ** length_penalty, the
            length counting the end token. Defaults to 0.
        record: tuple of str. State keys to collect for the chosen hypothesis at every step
            (e.g. "alpha"). Defaults to ().

    Returns:
        dict: tokens (B, max_length) int32 (the end token included, pad_id after it),
        lengths (B,) int32, log_prob (B,) float32 (summed over the chosen tokens), score
        (B,) (the ranking score), and each recorded key as (B, max_length, ...), zeros
        after the end.
    """
    k = int(beam_size)
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0; got {length_penalty}")
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    batch = tf.shape(start_ids)[0]

    def normalise(log_probs, length):
        if not length_penalty:
            return log_probs
        return log_probs / tf.pow(tf.cast(length, tf.float32), length_penalty)

    def record_history(key):
        value = initial_state[key]
        return tf.zeros(tf.concat([[batch, k, max_length], tf.shape(value)[1:]], 0), value.dtype)

    # Per-row state is tiled to the B*K hypotheses; scalars (e.g. a step counter) are shared.
    state = {key: tf.convert_to_tensor(value) for key, value in initial_state.items()}
    alive = {
        "tokens": tile_beams(start_ids, k),  # (B*K,) the last token of each hypothesis
        "state": {key: tile_beams(v, k) if v.shape.rank else v for key, v in state.items()},
        # Only beam 0 is open at the start, so the first expansion does not repeat itself.
        "log_prob": tf.tile(tf.constant([[0.0] + [NEG_INF] * (k - 1)]), [batch, 1]),  # (B, K)
        "seqs": tf.zeros([batch, k, max_length], tf.int32),
        "records": {key: record_history(key) for key in record},
    }
    finished = {
        "score": tf.fill([batch, k], NEG_INF),  # NEG_INF: an empty slot
        "log_prob": tf.zeros([batch, k]),
        "length": tf.zeros([batch, k], tf.int32),
        "seqs": tf.zeros([batch, k, max_length], tf.int32),
        "records": {key: record_history(key) for key in record},
    }

    def cond(step, alive, finished):
        best_alive = normalise(tf.reduce_max(alive["log_prob"], axis=1), max_length)  # (B,)
        worst_finished = tf.reduce_min(finished["score"], axis=1)  # NEG_INF until K finished
        return tf.logical_not(tf.reduce_all(worst_finished >= best_alive))

    def body(step, alive, finished):
        logits, state = next_fn(alive["tokens"], alive["state"])
        vocab = tf.shape(logits)[-1]
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        log_probs = tf.reshape(log_probs, [batch, k, vocab])  # (B, K, V)
        candidates = tf.reshape(alive["log_prob"][:, :, None] + log_probs, [batch, k * vocab])
        log_prob, flat = tf.math.top_k(candidates, k=2 * k)  # (B, 2K): 2K best extensions
        parent = flat // vocab  # (B, 2K): the alive beam each extends
        token = flat % vocab
        at_step = tf.one_hot(step, max_length, dtype=tf.int32)  # (T,)
        seqs = tf.gather(alive["seqs"], parent, batch_dims=1) + token[:, :, None] * at_step
        records = {}
        for key, history in alive["records"].items():
            value = tf.reshape(state[key], tf.concat([[batch, k], tf.shape(state[key])[1:]], 0))
            value = tf.gather(value, parent, batch_dims=1)  # (B, 2K, ...)
            mask = tf.one_hot(step, max_length, dtype=value.dtype)
            mask = tf.reshape(mask, [max_length] + [1] * (value.shape.rank - 2))  # (T, 1, ...)
            records[key] = tf.gather(history, parent, batch_dims=1) + value[:, :, None] * mask
        ends = tf.logical_and(tf.equal(token, end_id), log_prob > NEG_INF / 2)

        # The K best extensions that stay open.
        open_log_prob, chosen = tf.math.top_k(tf.where(ends, NEG_INF, log_prob), k=k)
        rows = tf.reshape(
            tf.gather(parent, chosen, batch_dims=1) + tf.range(batch)[:, None] * k, [-1]
        )  # (B*K,) the alive rows their states come from
        new_alive = {
            "tokens": tf.reshape(tf.gather(token, chosen, batch_dims=1), [-1]),
            "state": {
                key: tf.ensure_shape(tf.gather(value, rows), value.shape)
                if value.shape.rank
                else value
                for key, value in state.items()
            },
            "log_prob": open_log_prob,
            **tf.nest.map_structure(
                lambda v: tf.gather(v, chosen, batch_dims=1), {"seqs": seqs, "records": records}
            ),
        }
        # The K best finished ones: those kept so far and those that end now.
        ending = {
            "score": tf.where(ends, normalise(log_prob, step + 1), NEG_INF),
            "log_prob": log_prob,
            "length": tf.fill([batch, 2 * k], step + 1),
            "seqs": seqs,
            "records": records,
        }
        return step + 1, new_alive, _top(_pooled(finished, ending), k)

    steps, alive, finished = tf.while_loop(
        cond, body, (tf.constant(0), alive, finished), maximum_iterations=max_length
    )
    # After max_length steps, hypotheses that never ended compete at full length.
    ran_out = tf.equal(steps, max_length)
    unfinished = {
        "score": tf.where(ran_out, normalise(alive["log_prob"], max_length), NEG_INF),
        "log_prob": alive["log_prob"],
        "length": tf.fill([batch, k], max_length),
        "seqs": alive["seqs"],
        "records": alive["records"],
    }
    best = tf.nest.map_structure(lambda v: v[:, 0], _top(_pooled(finished, unfinished), 1))
    written = tf.range(max_length)[None, :] < best["length"][:, None]  # (B, T)
    return {
        "tokens": tf.where(written, best["seqs"], pad_id),
        "lengths": best["length"],
        "log_prob": best["log_prob"],
        "score": best["score"],
        **best["records"],
    }


def _pooled(finished, candidates):
    """`finished` with `candidates` appended along each image's pool (axis 1)."""
    return tf.nest.map_structure(lambda a, b: tf.concat([a, b], 1), finished, candidates)


def _top(pool, k):
    """The k entries of each image's pool with the highest "score", best first."""
    _, index = tf.math.top_k(pool["score"], k=k)
    return tf.nest.map_structure(lambda value: tf.gather(value, index, batch_dims=1), pool)
