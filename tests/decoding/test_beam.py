"""beam_search against exhaustive search, a NumPy beam search, known answers, greedy, XLA."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.decoding import beam_search, greedy_search

PAD, END, START = 0, 1, 5
V = 6  # pad, end, three words (2, 3, 4), start (never generated)
BANNED = np.array([-1e9, 0, 0, 0, 0, -1e9], np.float32)  # pad and start, as the Captioner bans


class TinyRNN:
    """A fixed random recurrent next-token model with a NumPy mirror (logits depend on the prefix)."""

    def __init__(self, seed=0, hidden=5):
        rng = np.random.default_rng(seed)
        self.embed = rng.normal(size=(V, hidden)).astype(np.float32)
        self.recur = rng.normal(size=(hidden, hidden)).astype(np.float32) * 0.8
        self.out = rng.normal(size=(hidden, V)).astype(np.float32) * 1.5

    def next_fn(self, tokens, state):
        h = tf.tanh(tf.gather(self.embed, tokens) + state["h"] @ self.recur)
        return h @ self.out + BANNED, {"h": h, "alpha": tf.nn.softmax(h, axis=-1)}

    def initial_state(self, batch, h=None):
        h = tf.zeros((batch, self.recur.shape[0])) if h is None else tf.constant(h, tf.float32)
        return {"h": h, "alpha": tf.zeros((batch, 5))}

    def next_log_probs(self, prefix):
        """log p(next token | prefix) over the vocabulary (NumPy, float64)."""
        h, token = np.zeros(self.recur.shape[0]), START
        for nxt in (*prefix, None):
            h = np.tanh(self.embed[token] + h @ self.recur)
            token = nxt
        logits = (h @ self.out + BANNED).astype(np.float64)
        return logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())

    def log_prob(self, sequence):
        """log p of a complete hypothesis (NumPy, float64)."""
        return sum(self.next_log_probs(sequence[:t])[sequence[t]] for t in range(len(sequence)))


def hypotheses(max_length):
    """Every complete hypothesis: words then <end> within max_length, or max_length words."""
    words = (2, 3, 4)
    for n in range(max_length):
        for prefix in itertools.product(words, repeat=n):
            yield (*prefix, END)
    yield from itertools.product(words, repeat=max_length)


def run(model, batch, beam, max_length, length_penalty=0.0, jit=False, h=None):
    fn = tf.function(
        lambda: beam_search(
            model.next_fn,
            model.initial_state(batch, h),
            tf.fill([batch], START),
            END,
            beam,
            max_length,
            length_penalty=length_penalty,
            record=("alpha",),
        ),
        jit_compile=jit,
    )
    return {k: v.numpy() for k, v in fn().items()}


@pytest.mark.parametrize("max_length, beam", [(2, 4), (3, 16)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_wide_enough_beam_finds_the_exhaustive_argmax(max_length, beam, seed):
    # Beam 4 keeps every one-token prefix (the vocabulary's 4 generable tokens), which is
    # exhaustive at length 2; beam 16 is exhaustive at length 3.
    model = TinyRNN(seed)
    best = max(hypotheses(max_length), key=model.log_prob)
    out = run(model, 1, beam, max_length)
    length = int(out["lengths"][0])
    assert tuple(out["tokens"][0, :length]) == best
    np.testing.assert_allclose(out["log_prob"][0], model.log_prob(best), rtol=1e-5)
    assert np.all(out["tokens"][0, length:] == PAD)


@pytest.mark.parametrize("seed", [0, 3])
def test_beam_one_follows_greedy_and_keeps_the_best_ending_on_the_way(seed):
    # One alive hypothesis extends by its best open token, as greedy decoding does, while
    # every ending met on the way is kept: the answer is greedy's when that is the best.
    model = TinyRNN(seed)
    greedy = greedy_search(
        model.next_fn, model.initial_state(1), tf.fill([1], START), END, 6, record=("alpha",)
    )
    beam = run(model, 1, 1, 6)
    expected_score, expected_log_p, expected = reference_beam_search(model, 1, 6)
    length = int(beam["lengths"][0])
    assert tuple(beam["tokens"][0, :length]) == expected
    assert beam["log_prob"][0] >= float(greedy["log_prob"][0]) - 1e-5
    if expected == tuple(greedy["tokens"].numpy()[0, : int(greedy["lengths"][0])]):
        np.testing.assert_allclose(beam["alpha"], greedy["alpha"].numpy(), rtol=1e-6)


def table_next_fn(table):
    """Logits from a table keyed by the previous token: {prev: probabilities over V}."""
    rows = np.full((V, V), 1e-9, np.float64)
    for prev, probs in table.items():
        rows[prev] = probs
    logits = tf.constant(np.log(rows / rows.sum(1, keepdims=True)), tf.float32)

    def next_fn(tokens, state):
        return tf.gather(logits, tokens), {"alpha": tf.one_hot(tokens, V)}

    return next_fn


def test_beam_finds_what_greedy_misses_and_records_the_chosen_beam():
    # Greedy takes word 2 (0.6) and then can only end at 0.4: p = 0.24.
    # Beam 2 also keeps word 3 (0.4), which ends with 0.95: p = 0.38.
    table = {
        START: [0, 0.0, 0.6, 0.4, 0, 0],
        2: [0, 0.4, 0.3, 0.3, 0, 0],
        3: [0, 0.95, 0.05, 0, 0, 0],
    }
    state = {"alpha": tf.zeros((1, V))}
    greedy = greedy_search(table_next_fn(table), state, tf.fill([1], START), END, 4)
    assert list(greedy["tokens"].numpy()[0, :2]) == [2, END]
    out = beam_search(table_next_fn(table), state, [START], END, 2, 4, record=("alpha",))
    np.testing.assert_array_equal(out["tokens"].numpy(), [[3, END, PAD, PAD]])
    padded = beam_search(table_next_fn(table), state, [START], END, 2, 4, pad_id=V + 1)
    np.testing.assert_array_equal(padded["tokens"].numpy(), [[3, END, V + 1, V + 1]])
    np.testing.assert_allclose(out["log_prob"].numpy(), [np.log(0.4 * 0.95)], rtol=1e-5)
    # The attention-like record is the chosen beam's: step t saw token t - 1, zeros after the end.
    alpha = out["alpha"].numpy()[0]
    assert list(alpha.argmax(-1)[:2]) == [START, 3] and np.all(alpha[2:] == 0)


def test_length_penalty_changes_the_winner():
    # <end> at once: log 0.5. Two words then <end>: log (0.5 * 0.9 * 0.9) (lower sum, higher mean).
    table = {START: [0, 0.5, 0.5, 0, 0, 0], 2: [0, 0, 0, 0.9, 0.1, 0], 3: [0, 0.9, 0.1, 0, 0, 0]}
    state = {"alpha": tf.zeros((1, V))}
    raw = beam_search(table_next_fn(table), state, [START], END, 3, 5)
    normalised = beam_search(table_next_fn(table), state, [START], END, 3, 5, length_penalty=1.0)
    np.testing.assert_array_equal(raw["tokens"].numpy()[0, :1], [END])
    np.testing.assert_array_equal(normalised["tokens"].numpy()[0, :3], [2, 3, END])
    np.testing.assert_allclose(
        normalised["score"].numpy(), [np.log(0.5 * 0.9 * 0.9) / 3], rtol=1e-5
    )


def test_no_end_token_returns_the_best_full_length_hypothesis():
    table = {START: [0, 0, 0.7, 0.3, 0, 0], 2: [0, 0, 0.2, 0.8, 0, 0], 3: [0, 0, 0.9, 0.1, 0, 0]}
    out = beam_search(table_next_fn(table), {"alpha": tf.zeros((2, V))}, [START] * 2, END, 3, 4)
    np.testing.assert_array_equal(out["tokens"].numpy(), [[2, 3, 2, 3]] * 2)
    np.testing.assert_array_equal(out["lengths"].numpy(), [4, 4])
    np.testing.assert_allclose(
        out["log_prob"].numpy(), [np.log(0.7 * 0.8 * 0.9 * 0.8)] * 2, rtol=1e-5
    )


def test_batched_and_compiled_with_xla_equals_one_image_at_a_time():
    model = TinyRNN(5)
    h = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)  # four different images
    compiled = run(model, 4, 3, 6, jit=True, h=h)
    assert len({tuple(row) for row in compiled["tokens"]}) > 1
    for row in range(4):
        single = run(model, 1, 3, 6, h=h[row : row + 1])
        for key in ("tokens", "lengths", "log_prob", "alpha"):
            np.testing.assert_allclose(compiled[key][row], single[key][0], rtol=1e-5, atol=1e-6)


def reference_beam_search(model, k, max_length, length_penalty=0.0):
    """Beam search with separate alive and finished sets, in plain Python (float64)."""

    def score(log_p, length):
        return log_p / length**length_penalty if length_penalty else log_p

    alive, finished = [((), 0.0)], []  # (tokens, log p); (score, log p, tokens)
    for step in range(max_length):
        best_alive = score(max(log_p for _, log_p in alive), max_length)
        if len(finished) == k and min(f[0] for f in finished) >= best_alive:
            break
        extensions = [
            (log_p + step_log_p, (*tokens, token))
            for tokens, log_p in alive
            for token, step_log_p in enumerate(model.next_log_probs(tokens))
        ]
        extensions = sorted(extensions, key=lambda e: -e[0])[: 2 * k]
        for log_p, tokens in extensions:
            if tokens[-1] == END and log_p > -1e8:
                finished.append((score(log_p, step + 1), log_p, tokens))
        finished = sorted(finished, key=lambda f: -f[0])[:k]
        alive = [(t, log_p) for log_p, t in extensions if t[-1] != END][:k]
    else:  # ran out of steps: the open hypotheses compete at full length
        finished += [(score(log_p, max_length), log_p, t) for t, log_p in alive]
    return max(finished, key=lambda f: f[0])


@pytest.mark.parametrize("beam", [2, 3])
def test_a_finished_caption_is_never_evicted_by_open_ones_that_end_lower(beam):
    # <end> at once has p 0.3. Word 2 (0.7) branches into words 3 and 4 (0.35 each, both
    # above 0.3), and everything after them falls below 0.3 and rarely ends. A beam that
    # keeps finished hypotheses among the open ones drops the 0.3 caption at K = 2.
    after = [0, 0.1, 0.3, 0.3, 0.3, 0]
    table = {START: [0, 0.3, 0.7, 0, 0, 0], 2: [0, 0, 0, 0.5, 0.5, 0], 3: after, 4: after}
    out = beam_search(table_next_fn(table), {"alpha": tf.zeros((1, V))}, [START], END, beam, 5)
    np.testing.assert_array_equal(out["tokens"].numpy(), [[END, PAD, PAD, PAD, PAD]])
    np.testing.assert_allclose(out["log_prob"].numpy(), [np.log(0.3)], rtol=1e-5)
    assert int(out["lengths"][0]) == 1


@pytest.mark.parametrize("length_penalty", [0.0, 0.7])
@pytest.mark.parametrize("seed", range(10, 30))
def test_a_narrow_beam_matches_a_plain_python_beam_search(seed, length_penalty):
    # K = 2 keeps far fewer than the 4 ** 5 prefixes: the search is not exhaustive, and
    # what it returns must be what the alive/finished algorithm returns. A bias towards
    # <end> makes endings common (with the length penalty, seeds 16 and 27 catch a beam
    # that lets open hypotheses evict finished ones).
    model = TinyRNN(seed)
    model.out[:, END] += 1.0
    expected_score, expected_log_p, expected = reference_beam_search(model, 2, 5, length_penalty)
    out = run(model, 1, 2, 5, length_penalty=length_penalty)
    length = int(out["lengths"][0])
    assert tuple(out["tokens"][0, :length]) == expected
    np.testing.assert_allclose(out["log_prob"][0], expected_log_p, rtol=1e-5)
    np.testing.assert_allclose(out["score"][0], expected_score, rtol=1e-5)


def test_beam_search_is_one_fixed_shape_loop_under_xla_with_a_length_penalty():
    model = TinyRNN(7)
    h = np.random.default_rng(2).normal(size=(3, 5)).astype(np.float32)
    compiled = run(model, 3, 2, 6, length_penalty=0.7, jit=True, h=h)
    plain = run(model, 3, 2, 6, length_penalty=0.7, jit=False, h=h)
    for key in ("tokens", "lengths", "log_prob", "score", "alpha"):
        np.testing.assert_allclose(compiled[key], plain[key], rtol=1e-5, atol=1e-6)
