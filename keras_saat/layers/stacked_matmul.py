"""StepMatmuls: x_t @ W over the steps of an unrolled loop, with one gradient for W.

Backpropagation through time gives the kernel W of a recurrence the gradient
sum_t x_t^T dy_t. Left to autodiff, that is one (in, B) x (B, out) matmul per step,
whose inner dimension is the batch. CPU kernels run such thin matmuls well below the
rate of the same work stacked over the T steps into one (in, T*B) x (T*B, out) matmul.

`StepMatmuls` computes the same values and the same gradients, arranged that way:
each step multiplies by `stop_gradient(W)`, so the input's gradient dy_t W^T flows as
usual, and adds a zero "probe" tensor; the probes of all steps come from one
`tf.custom_gradient` function of W, whose gradient receives every dy_t at once and
returns X^T dY, with X the stacked step inputs. The inputs are recorded as the loop
runs, and read when the gradient is built (by then the loop has run).

The annotations a (B, L, D) are such a kernel too: the context sum_i alpha_ti a_i is the
batched matmul alpha_t a, and autodiff gives a the gradient alpha_t^T dz_t, a (B, L, D)
tensor per step, summed over the steps. Stacked, it is one (B, L, T) x (B, T, D) batched
matmul.

The input's gradient dy_t W^T is left to autodiff for a per-example kernel, but for a
weight it is a plain matmul by W^T, transposed once for all steps: autodiff's
`MatMul(transpose_b=True)` with a thin left operand is the slow case of the CPU
kernel, and Grappler would otherwise fold the transpose back
into it.

`LoopMatmuls` does the same inside a `tf.while_loop`, whose body is traced once: the
probes are a (T, ...) zero tensor behind a TensorArray, each iteration adds its row
(the gradient of that read writes dy_t into row t, an in-place update under XLA), and
each iteration's input x_t is written to a TensorArray the loop carries; after the loop
the inputs are stacked and the kernel's gradient is again X^T dY, one matmul. Left to
autodiff, the loop's backward pass computes x_t^T dy_t in every iteration and adds it to
an accumulator of the kernel's shape: a (B, L, D) outer product and sum each iteration
for the annotations.
"""

import functools

import tensorflow as tf


class StepMatmuls:
    """x_t @ kernel for t = 0..steps-1, the kernel's gradient as one stacked matmul.

    Call it once per step, in order: `step_matmuls(x_t)` returns x_t @ kernel. Values and
    gradients equal `tf.matmul(x_t, kernel)`'s; only the kernel gradient's arrangement
    differs. Use a new object for each pass through the loop.

    Two kinds of kernel:
    - a weight (in, out), with x_t (B, in) -> (B, out); `rows` is (B,);
    - a per-example tensor (B, in, out), such as the annotations, with x_t (B, R, in)
      -> (B, R, out); `rows` is (B, R).

    Args:
        kernel: tensor (in, out) or (B, in, out), already cast to the compute dtype.
        steps: int. The number of steps the loop will run.
        rows: list of ints or scalar tensors. x_t's shape without its last axis.
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
    """x_t @ kernel in the body of a `tf.while_loop` over t = 0..steps-1 (and for a first
    step before it), the kernel's gradient as one stacked matmul after the loop.

    In the body, set `last_input` to None, then `loop_matmuls.at(t)(x_t)` returns
    x_t @ kernel (once a step: a second call is an error) and `last_input` is x_t, which
    the loop writes to a TensorArray it carries. After the loop, hand the
    stacked inputs (T, ...) to `record`, before the gradient is taken. Values and
    gradients equal `tf.matmul(x_t, kernel)`'s; kernels and rows as in `StepMatmuls`.

    Args:
        kernel: tensor (in, out) or (B, in, out), already cast to the compute dtype.
        steps: int or scalar tensor. The number of steps the loop covers.
        rows: list of ints or scalar tensors. x_t's shape without its last axis.
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

    W^T is made once for all steps; a graph prunes it when no gradient is taken. Snapshot
    makes it a tensor of its own: Grappler folds a bare Transpose feeding a MatMul back
    into `transpose_b=True`, the slow case this avoids.
    """
    frozen = tf.stop_gradient(kernel)
    if kernel.shape.rank != 2:
        return frozen, None
    return frozen, tf.raw_ops.Snapshot(input=tf.transpose(frozen))


def _product_shape(kernel, rows):
    """x_t @ kernel's shape: rows and the kernel's last axis, as a 1-D int32 tensor."""
    return tf.stack([*rows, tf.shape(kernel)[-1]])


def _frozen_matmul(x, kernel, transposed):
    """x @ kernel (a stopped-gradient weight or per-example kernel); for a weight, x's
    gradient is dy @ transposed (kernel^T, made once). Only x gets a gradient: left to
    autodiff, a batched matmul would compute the frozen kernel's too, and in a loop's
    body that (B, in, out) product is not pruned."""
    if transposed is None:
        return _matmul_for_input(x, kernel)
    return _matmul_by_transposed(x, kernel, transposed)


def _matmul_for_input(x, kernel):
    """x @ kernel for a per-example kernel (B, in, out), with a gradient for x alone."""

    @tf.custom_gradient
    def matmul(x):
        return tf.matmul(x, kernel), lambda dy: tf.matmul(dy, kernel, adjoint_b=True)

    return matmul(x)


def _matmul_by_transposed(x, kernel, transposed):
    """x @ kernel, whose gradient for x is dy @ transposed (kernel^T, made once)."""

    @tf.custom_gradient
    def matmul(x):
        return tf.matmul(x, kernel), lambda dy: tf.matmul(dy, transposed)

    return matmul(x)
