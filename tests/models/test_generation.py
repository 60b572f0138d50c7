"""`Captioner.decode`'s compiled searches: traced without AutoGraph, the graph it would give."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

from keras_saat import Captioner
from keras_saat.data.shapes import vocabulary_words
from keras_saat.runtime.precision import dtype_policy
from keras_saat.text import Vocabulary


def _ops(concrete):
    """The op multiset of a traced function: its graph and its loops' and conds' bodies."""
    definition = concrete.graph.as_graph_def()
    count = collections.Counter(node.op for node in definition.node)
    for body in definition.library.function:
        count.update(node.op for node in body.node_def)
    return count


@pytest.mark.parametrize(
    "attention,beam_size,precision",
    [("soft", 3, "float32"), ("hard", 1, "bfloat16")],  # beam and greedy, each attention
)
def test_decoding_traces_to_the_graph_autograph_would_give(attention, beam_size, precision):
    """The searches are tf.while_loops and the layers branch on Python values only, so the
    decode function skips AutoGraph's conversion (2-3 s of a fresh process's first
    decode: benchmarks/decode_first_call.py) and traces the same ops, in the graph and the loops' bodies."""
    vocabulary = Vocabulary.build([vocabulary_words()])
    with dtype_policy(precision):
        model = Captioner(
            vocabulary.words, attention=attention, feature_dim=16, embedding_dim=8,
            lstm_units=24, attention_units=8, seed=0,
        )  # fmt: skip
        features = np.zeros((2, 64, 128), np.float32)
        decoded = model.decode(features, max_length=6, beam_size=beam_size)
        assert decoded["tokens"].shape == (2, 7)
        (function,) = model._decode_fns.values()
        spec = tf.TensorSpec([None, 64, 128], tf.float32)
        converted = tf.function(
            functools.partial(
                model.generate_step, max_length=6, beam_size=beam_size, length_penalty=0.0
            ),
            autograph=True,
        )
        ours, autographs = (
            _ops(function.get_concrete_function(spec)),
            _ops(converted.get_concrete_function(spec)),
        )
    assert ours["While"] + ours["StatelessWhile"] >= 1  # the search's loop
    assert ours == autographs
