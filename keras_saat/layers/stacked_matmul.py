"""StepMatmuls and LoopMatmuls: x_t @ W over a loop's steps, with W's gradient as one matmul.

Backpropagation through time gives a kernel the gradient sum_t x_t^T dy_t; autodiff
computes it as T thin matmuls (inner dimension the batch), which CPU kernels run well
below the rate of one (in, T*B) x (T*B, out) matmul. Each step multiplies by
`stop_gradient(W)` and adds a zero "probe" from one `tf.custom_gradient` function of W,
whose gradient receives every dy_t at once and returns X^T dY. The annotations of the
context sum_i alpha_ti a_i are such a kernel too. `LoopMatmuls` does the same in a
`tf.while_loop`, with the probes and inputs in TensorArrays.
"""

import functools

import tensorflow as tf


class StepMatmuls:
    """x_t @ kernel for t = 0..steps-1, the kernel's gradient as one stacked matmul.

    Call it once per step, in order; values and gradients equal `tf.matmul(x_t, kernel)`'s.
    Use a new object for each pass through the loop. The kernel, in the compute dtype, is a
    weight (in, out) with `rows` [B], or a per-example tensor (B, in, out) with `rows`
    [B, R]: x_t's shape without its last axis.
    """

    def __init__(self, kernel, steps, rows):
        self.kernel = tf.convert_to_tensor(kernel)
        self.steps = int(steps)
        self.inputs = []
        self.frozen_kernel, self.transposed = _frozen(self.kernel)
        self.probes = self._probes(self.kernel, list(rows))

    def _probes(self, kernel, rows):
        inputs = self.inputs
        steps = self.steps
        shape = _product_shape(kernel, rows)

        @tf.custom_gradient
        def probes(kernel):
            zeros = tf.zeros(shape, kernel.dtype)
            outputs = [tf.identity(zeros) for _ in range(steps)]

            def grad(*upstream):
                if len(inputs) != steps:
                    raise RuntimeError(
                        f"StepMatmuls was built for {steps} steps but called {len(inputs)} times"
                    )
                upstream = [tf.zeros_like(zeros) if g is None else g for g in upstream]
                x = tf.concat(inputs, axis=-2)  # (T*B, in) or (B, T*R, in)
                dy = tf.concat(upstream, axis=-2)  # (T*B, out) or (B, T*R, out)
                return tf.matmul(x, dy, transpose_a=True)  # the kernel's shape

            return outputs, grad

        return probes(kernel)

    def __call__(self, x):
        t = len(self.inputs)
        if t >= self.steps:
            raise RuntimeError(f"StepMatmuls was built for {self.steps} steps; called once more")
        self.inputs.append(tf.stop_gradient(x))
        return _frozen_matmul(x, self.frozen_kernel, self.transposed) + self.probes[t]


class LoopMatmuls:
    """`StepMatmuls` for the body of a `tf.while_loop` (and a first step before it).

    In the body, set `last_input` to None, then `loop_matmuls.at(t)(x_t)` returns
    x_t @ kernel (once a step) and `last_input` is x_t for the loop to write to a
    TensorArray. After the loop, pass the stacked inputs (T, ...) to `record` before the
    gradient is taken. The arguments are `StepMatmuls`' (`steps` may be a scalar tensor).
    """

    def __init__(self, kernel, steps, rows):
        self.kernel = tf.convert_to_tensor(kernel)
        self.frozen_kernel, self.transposed = _frozen(self.kernel)
        self.inputs = None  # the stacked x_t (T, ...), from `record`
        self.last_input = None  # x_t of the latest call, for the loop to write
        probes = self._probes(self.kernel, steps, list(rows))  # (T, ..., out) zeros
        self.probes = tf.TensorArray(
            probes.dtype, size=steps, element_shape=probes.shape[1:], clear_after_read=False
        ).unstack(probes)

    def _probes(self, kernel, steps, rows):
        shape = tf.concat([[steps], _product_shape(kernel, rows)], axis=0)

        @tf.custom_gradient
        def probes(kernel):
            def grad(upstream):  # (T, *rows, out): every step's dy, stacked after the loop
                if self.inputs is None:
                    raise RuntimeError("LoopMatmuls: record() the stacked inputs after the loop")
                x, dy = self.inputs, upstream
                if kernel.shape.rank == 2:  # (T*B, in)^T (T*B, out)
                    flat = [tf.reshape(v, [-1, tf.shape(v)[-1]]) for v in (x, dy)]
                    return tf.matmul(*flat, transpose_a=True)
                # (T, B, R, .) -> (B, T*R, .), then one batched matmul
                x, dy = (tf.transpose(v, [1, 0, *range(2, v.shape.rank)]) for v in (x, dy))
                x, dy = (
                    tf.reshape(v, tf.stack([tf.shape(v)[0], -1, tf.shape(v)[-1]])) for v in (x, dy)
                )
                return tf.matmul(x, dy, transpose_a=True)

            return tf.zeros(shape, kernel.dtype), grad

        return probes(kernel)

    def at(self, t):
        """x -> x @ kernel at step t (a scalar, the loop's counter in the body)."""
        return functools.partial(self._call, t)

    def _call(self, t, x):
        if self.last_input is not None:  # one step's second call: its dy would share row t
            raise RuntimeError(
                "LoopMatmuls was called twice in one step; set last_input to None at each "
                "step's start and call it once a step (use one LoopMatmuls per product)"
            )
        self.last_input = tf.stop_gradient(x)
        return _frozen_matmul(x, self.frozen_kernel, self.transposed) + self.probes.read(t)

    def record(self, inputs):
        """The inputs x_t of every step, stacked on a first axis of T."""
        self.inputs = tf.stop_gradient(inputs)


def _frozen(kernel):
    """(the kernel without a gradient, its transpose for a weight's input gradient or None).

    Snapshot keeps W^T a tensor of its own: Grappler would fold a bare Transpose back into
    `MatMul(transpose_b=True)`, the slow CPU case this avoids.
    """
    frozen = tf.stop_gradient(kernel)
    if kernel.shape.rank != 2:
        return frozen, None
    return frozen, tf.raw_ops.Snapshot(input=tf.transpose(frozen))


def _product_shape(kernel, rows):
    """x_t @ kernel's shape: rows and the kernel's last axis, as a 1-D int32 tensor."""
    return tf.stack([*rows, tf.shape(kernel)[-1]])


def _frozen_matmul(x, kernel, transposed):
    """x @ kernel with a gradient for x alone (a batched matmul would also compute the
    frozen kernel's, which a loop body does not prune); a weight's is dy @ `transposed`."""

    @tf.custom_gradient
    def matmul(x):
        if transposed is None:  # a per-example kernel (B, in, out)
            return tf.matmul(x, kernel), lambda dy: tf.matmul(dy, kernel, adjoint_b=True)
        return tf.matmul(x, kernel), lambda dy: tf.matmul(dy, transposed)

    return matmul(x)
