"""StepScores and LoopScores: Eq. 4's scores tanh(W_a a + W_h h_{t-1}) v over T steps,
with no (B, L, A) energy tensor kept for the backward pass.

Autodiff makes about ten passes over a (B, L, A) tensor per step, the memory traffic
that bounds the step on a GPU. Here the forward reduces as it goes and records only
q_t = W_h h_{t-1}; each step's backward recomputes the tanh for q_t's gradient; p and v
get theirs once, after the recurrence, through zero "probes" (as in `StepMatmuls`)
whose gradient function sees all T upstream gradients (`summed_gradients`). The
reductions run in float32 under mixed precision.
"""

import functools

import tensorflow as tf


def _recomputed(*tensors):
    """The tensors behind XLA's optimisation barrier, so that XLA's CSE does not merge the
    backward tanh with the forward's and store the (B, L, A) energy; unchanged outside XLA."""
    if not _in_xla():
        return tensors
    try:
        from tensorflow.compiler.tf2xla.python import xla
    except ImportError:  # a TensorFlow without it: correct values, merged by CSE
        return tensors
    return tuple(xla.optimization_barrier(*tensors))


def _in_xla():
    """Whether the graph being built is one XLA compiles."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _gradients(projected, kernel, d_pre, d_v):
    """d p = (sum_t ds_t (1 - e_t^2)) v and d v, in the dtypes of p and v."""
    v = tf.cast(tf.reshape(kernel, [-1]), tf.float32)
    d_projected = tf.cast(d_pre * v, projected.dtype)
    return d_projected, tf.cast(tf.reshape(d_v, tf.shape(kernel)), kernel.dtype)


def summed_gradients(projected, kernel, queries, d_scores):
    """The gradients of p = W_a a + b_a (B, L, A) and v (A, 1) from every step at once, in
    their dtypes: `queries` (T, B, A) holds each step's W_h h_{t-1}, `d_scores` (T, B, L)
    each step's upstream gradient of s_t."""
    if not _in_xla():
        return _summed_by_step(projected, kernel, queries, d_scores)
    # Two reductions over the same (T, B, L, A) terms, each recomputing the tanh: with
    # one tanh feeding both, XLA would store it (an expensive op with two consumers is
    # not duplicated into fusions). d p sums over the steps (T major); d v over (B, L, T)
    # with T minor, so that the rows of one (b, l) read the same row of p one after another.
    p, q, ds = _recomputed(projected, queries, d_scores)
    energy = tf.tanh(_f32(p)[None] + _f32(q)[:, :, None, :])  # (T, B, L, A)
    d_pre = tf.reduce_sum(_f32(ds)[..., None] * (1.0 - tf.square(energy)), axis=0)
    # The second barrier also takes d_pre, so that it is not merged with the first.
    p, q, ds, d_pre = _recomputed(
        projected, tf.transpose(queries, [1, 0, 2]), tf.transpose(d_scores, [1, 2, 0]), d_pre
    )
    energy = tf.tanh(_f32(p)[:, :, None] + _f32(q)[:, None])  # (B, L, T, A)
    d_v = tf.reduce_sum(_f32(ds)[..., None] * energy, axis=[0, 1, 2])  # (A,)
    return _gradients(projected, kernel, d_pre, d_v)


def _summed_by_step(projected, kernel, queries, d_scores):
    """`summed_gradients` one step at a time, which holds (B, L, A) rather than (T, B, L, A)."""
    p = _f32(projected)

    def add(sums, step):
        d_pre, d_v = sums
        query, ds = step
        energy = tf.tanh(p + _f32(query)[:, None, :])
        ds = _f32(ds)[..., None]  # (B, L, 1)
        return d_pre + ds * (1.0 - energy * energy), d_v + tf.reduce_sum(ds * energy, [0, 1])

    zeros = (tf.zeros_like(p), tf.zeros(tf.shape(p)[-1:], tf.float32))
    d_pre, d_v = tf.foldl(add, (queries, d_scores), initializer=zeros, parallel_iterations=1)
    return _gradients(projected, kernel, d_pre, d_v)


def _f32(x):
    return tf.cast(x, tf.float32)


class StepScores:
    """s_t = tanh(projected + query_t) @ v for t = 0..steps-1, fused, with one gradient
    for `projected` and `v` summed over the steps.

    Call it once per step, in order: `step_scores(query_t)` returns s_t (B, L). Use a new
    object for each pass through the loop. `projected` (B, L, A) is W_a a + b_a and `kernel`
    (A, 1) is v, both in the compute dtype.
    """

    def __init__(self, projected, kernel, steps):
        self.steps = int(steps)
        self.queries = []
        self.frozen_projected = tf.stop_gradient(projected)
        self.frozen_v = tf.stop_gradient(tf.reshape(kernel, [-1]))
        self.probes = self._probes(projected, kernel)

    def _probes(self, projected, kernel):
        queries, steps = self.queries, self.steps

        @tf.custom_gradient
        def probes(projected, kernel):
            zeros = tf.zeros(tf.shape(projected)[:-1], projected.dtype)  # (B, L)
            outputs = [tf.identity(zeros) for _ in range(steps)]

            def grad(*upstream):
                if len(queries) != steps:
                    raise RuntimeError(
                        f"StepScores was built for {steps} steps but called {len(queries)} times"
                    )
                present = [(q, d) for q, d in zip(queries, upstream, strict=True) if d is not None]
                if not present:
                    return tf.zeros_like(projected), tf.zeros_like(kernel)
                queries_, d_scores = zip(*present, strict=True)
                return summed_gradients(
                    projected, kernel, tf.stack(queries_), tf.stack(d_scores)
                )  # fmt: skip

            return outputs, grad

        return probes(projected, kernel)

    def __call__(self, query):
        t = len(self.queries)
        if t >= self.steps:
            raise RuntimeError(f"StepScores was built for {self.steps} steps; called once more")
        self.queries.append(tf.stop_gradient(query))
        return fused_scores(self.frozen_projected, self.frozen_v, query) + self.probes[t]


class LoopScores:
    """`StepScores` for the body of a `tf.while_loop`, used as `LoopMatmuls` is (`steps`
    may be a scalar tensor)."""

    def __init__(self, projected, kernel, steps):
        self.frozen_projected = tf.stop_gradient(projected)
        self.frozen_v = tf.stop_gradient(tf.reshape(kernel, [-1]))
        self.queries = None  # (T, B, A), from `record`
        self.last_input = None
        probes = self._probes(projected, kernel, steps)  # (T, B, L) zeros
        self.probes = tf.TensorArray(
            probes.dtype, size=steps, element_shape=probes.shape[1:], clear_after_read=False
        ).unstack(probes)

    def _probes(self, projected, kernel, steps):
        @tf.custom_gradient
        def probes(projected, kernel):
            def grad(upstream):  # (T, B, L): every step's ds_t, stacked after the loop
                if self.queries is None:
                    raise RuntimeError("LoopScores: record() the stacked queries after the loop")
                return summed_gradients(projected, kernel, self.queries, upstream)

            shape = tf.concat([[steps], tf.shape(projected)[:-1]], axis=0)
            return tf.zeros(shape, projected.dtype), grad

        return probes(projected, kernel)

    def at(self, t):
        """query -> s_t at step t (a scalar, the loop's counter in the body)."""
        return functools.partial(self._call, t)

    def _call(self, t, query):
        if self.last_input is not None:  # a second call would share row t's gradient
            raise RuntimeError(
                "LoopScores was called twice in one step; set last_input to None at each "
                "step's start and call it once a step"
            )
        self.last_input = tf.stop_gradient(query)
        return fused_scores(self.frozen_projected, self.frozen_v, query) + self.probes.read(t)

    def record(self, queries):
        """The queries of every step, stacked on a first axis of T."""
        self.queries = tf.stop_gradient(queries)


def fused_scores(projected, v, query):
    """sum_a v_a tanh(projected + query[:, None])_a: (B, L, A), (A,), (B, A) -> (B, L).

    The gradient is for `query` only, recomputing the tanh rather than keeping it.
    """

    @tf.custom_gradient
    def scores(query):
        q = tf.cast(query, tf.float32)[:, None, :]
        p, w = tf.cast(projected, tf.float32), tf.cast(v, tf.float32)
        out = tf.cast(tf.reduce_sum(tf.tanh(p + q) * w, axis=-1), query.dtype)

        def grad(d_scores):
            p, q, d_scores = _recomputed(projected, query, d_scores)
            energy = tf.tanh(tf.cast(p, tf.float32) + tf.cast(q, tf.float32)[:, None])
            d_pre = tf.cast(d_scores, tf.float32)[..., None] * (1.0 - energy * energy)
            return tf.cast(tf.reduce_sum(d_pre, axis=1) * tf.cast(v, tf.float32), query.dtype)

        return out, grad

    return scores(query)
