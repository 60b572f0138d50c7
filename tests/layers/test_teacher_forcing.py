"""Teacher forcing unrolled and as one tf.while_loop: the same values and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from keras_saat.layers import LSTMDecoder
from tests.helpers import decoder_run


@pytest.mark.slow
@pytest.mark.parametrize(
    "attention,gating,compiled",
    [("soft", True, None), ("soft", False, False), ("soft", True, True),
     ("hard", True, None), ("hard", True, True)],
)  # fmt: skip
def test_loop_equals_unrolled(attention, gating, compiled):
    loss, grads, out = decoder_run(attention, gating, True, compiled)
    loop_loss, loop_grads, loop_out = decoder_run(attention, gating, False, compiled)
    np.testing.assert_allclose(loop_loss, loss, rtol=1e-5)
    assert loop_out.keys() == out.keys()
    for key in out:
        np.testing.assert_allclose(
            np.asarray(loop_out[key], "float32"), np.asarray(out[key], "float32"),
            rtol=1e-5, atol=1e-6, err_msg=key,
        )  # fmt: skip
    if attention == "hard":  # the same draws, in the same order, from the seed generator
        np.testing.assert_array_equal(loop_out["samples"], out["samples"])
        assert 0 < np.mean(out["samples"] != np.argmax(out["alphas"], -1))
    for name, want in grads.items():
        np.testing.assert_allclose(loop_grads[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    assert np.abs(grads["annotations"]).max() > 1e-3


def test_loop_equals_unrolled_in_bfloat16():
    loss, grads, _ = decoder_run("soft", True, True, None, precision="bfloat16")
    loop_loss, loop_grads, _ = decoder_run("soft", True, False, None, precision="bfloat16")
    np.testing.assert_allclose(loop_loss, loss, rtol=2e-2)
    for name, want in grads.items():
        scale = np.abs(want).max() + 1e-6
        assert np.abs(loop_grads[name] - want).max() / scale < 5e-2, name


def graph_ops(unroll, steps):
    """The number of ops in the traced graph of a teacher-forced pass and its gradient."""
    decoder = LSTMDecoder(13, embedding_dim=6, lstm_units=7, attention_units=5, unroll=unroll)
    decoder.build(4)

    @tf.function
    def run(annotations, ids):
        with tf.GradientTape() as tape:
            tape.watch(annotations)
            loss = tf.reduce_sum(decoder(annotations, ids, training=True)["logits"])
        return tape.gradient(loss, [annotations, *decoder.trainable_weights])

    graph = run.get_concrete_function(
        tf.TensorSpec((2, 9, 4), tf.float32), tf.TensorSpec((2, steps), tf.int32)
    ).graph
    return len(graph.get_operations())


def test_the_loop_graph_does_not_grow_with_the_caption_length():
    """What XLA compiles: a fixed graph in loop form, T copies of the step unrolled."""
    assert graph_ops(False, 4) == graph_ops(False, 16)
    short, long = graph_ops(True, 4), graph_ops(True, 16)
    assert long > short + 12 * 10  # each unrolled step adds its ops, forward and backward


def gradient_graph(decoder, steps=6):
    """The traced graph of a teacher-forced pass (annotations (2, 9, 4)) and its gradient."""
    annotations = tf.constant(np.random.default_rng(0).random((2, 9, 4)), tf.float32)
    ids = tf.ones((2, steps), tf.int32)

    @tf.function
    def run(annotations, ids):
        with tf.GradientTape() as tape:
            tape.watch(annotations)
            out = decoder(annotations, ids, training=True)
            loss = tf.reduce_sum(out["logits"]) + tf.reduce_sum(out["alphas"] ** 2)
        return tape.gradient(loss, [annotations, *decoder.trainable_weights])

    return run.get_concrete_function(annotations, ids).graph


def stacked_sources(decoder, steps=6):
    """The producing ops (and their first inputs', up to 3 deep) of every tensor the loop
    form's gradient stacks over the iterations (its TensorListPushBack ops)."""
    graph = gradient_graph(decoder, steps)
    chains = []
    for function in graph._functions.values():  # noqa: SLF001 (the while loop's bodies)
        nodes = {n.name: n for n in function.cached_definition.node_def}
        for node in nodes.values():
            if node.op != "TensorListPushBack":
                continue
            chain, source = [], node.input[1].split(":")[0]
            while source in nodes and len(chain) < 3:
                chain.append(nodes[source].op)
                source = (nodes[source].input or [""])[0].split(":")[0]
            chains.append(chain)
    return chains


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_the_loop_takes_each_kernel_gradient_after_it(attention):
    """LoopMatmuls: the backward loop computes no product of a kernel's shape an
    iteration (U with the attention's W_h and f_beta, W_z, the annotations in the
    context); each kernel's gradient is one matmul over the stacked steps after it."""
    decoder = LSTMDecoder(
        13, embedding_dim=6, lstm_units=7, attention_units=5, attention=attention, unroll=False
    )
    decoder.build(4)
    graph = gradient_graph(decoder)
    bodies = [
        f.graph
        for name, f in graph._functions.items()  # noqa: SLF001
        if "body" in name and "_grad" in name
    ]
    products = [
        out.shape.as_list()
        for body in bodies
        for op in body.get_operations()
        if op.type in ("MatMul", "BatchMatMulV2")
        for out in op.outputs
    ]
    assert len(bodies) == 1 and products
    kernels = [[7, 4 * 7 + 5 + 1], [4, 4 * 7], [2, 9, 4]]
    assert not [shape for shape in products if shape in kernels], products
    outside = [
        out.shape.as_list()
        for op in graph.get_operations()
        if op.type in ("MatMul", "BatchMatMulV2")
        for out in op.outputs
    ]
    assert all(shape in outside for shape in kernels)


def test_the_loop_stacks_no_kernel_and_each_energy_once():
    """The kernels are read before the loop (a value made in the body that the gradient
    needs is stacked every iteration), and the scores' gradient reads the tanh energy
    that tanh's own gradient keeps, not a reshaped copy of it."""
    decoder = LSTMDecoder(13, embedding_dim=6, lstm_units=7, attention_units=5, unroll=False)
    decoder.build(4)
    chains = stacked_sources(decoder)
    assert chains and not [c for c in chains if "ReadVariableOp" in c[:2]]
    assert not [c for c in chains if c[:2] == ["Reshape", "Tanh"]]
    assert sum(c[:1] == ["Tanh"] for c in chains) == 3  # the energy, the LSTM's g and c


@pytest.mark.parametrize("unroll, fused", [(True, False), (False, False), (True, True)])
def test_per_image_annotations_give_the_repeated_rows_values_and_gradients(unroll, fused):
    """`repeats=k`: W_a a and h_0, c_0 from n rows, not n * k; the same outputs and
    gradients as the annotations repeated for each caption."""
    decoder = LSTMDecoder(
        13, embedding_dim=6, lstm_units=7, attention_units=5, dropout=0.0, unroll=unroll,
        fused_scores=fused,
    )  # fmt: skip
    decoder.build(4)
    rng = np.random.default_rng(0)
    per_image = tf.constant(rng.normal(size=(3, 9, 4)), tf.float32)
    ids = tf.constant(rng.integers(0, 13, size=(6, 5)), tf.int32)  # k = 2 captions an image

    def run(annotations, repeats):
        with tf.GradientTape() as tape:
            tape.watch(annotations)
            out = decoder(annotations, ids, training=True, repeats=repeats)
            loss = tf.reduce_sum(out["logits"] * tf.cast(tf.range(13), tf.float32) / 13.0)
        return out, tape.gradient(loss, [annotations, *decoder.trainable_weights])

    out, grads = run(per_image, 2)
    with tf.GradientTape() as outer:  # the repeated rows' gradient, summed back per image
        outer.watch(per_image)
        repeated = tf.repeat(per_image, 2, axis=0)
    want_out, want_grads = run(repeated, None)
    want_grads[0] = outer.gradient(repeated, per_image, output_gradients=want_grads[0])
    for key in ("logits", "alphas", "betas"):
        np.testing.assert_allclose(out[key], want_out[key], rtol=1e-5, atol=1e-6, err_msg=key)
    names = ["annotations", *(w.path for w in decoder.trainable_weights)]
    for name, got, want in zip(names, grads, want_grads, strict=True):
        got, want = tf.convert_to_tensor(got), tf.convert_to_tensor(want)  # embedding: slices
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=name)
    projected_rows = []
    project = decoder.attention.project
    decoder.attention.project = lambda a: projected_rows.append(a.shape[0]) or project(a)
    assert decoder.annotated(per_image, 2)[1].shape == (6, 9, 5)
    assert projected_rows == [3]  # W_a a once per image


def test_the_computation_settings_survive_the_config():
    """`unroll` and `fused_scores` are saved with the layer, as its other settings are."""
    decoder = LSTMDecoder(13, unroll=False, fused_scores=True)
    rebuilt = LSTMDecoder.from_config(decoder.get_config())
    assert (rebuilt.unroll, rebuilt.fused_scores) == (False, True)
    default = LSTMDecoder.from_config(LSTMDecoder(13).get_config())
    assert (default.unroll, default.fused_scores) == (True, False)
