import numpy as np
import pytest
import tensorflow as tf

from keras_saat.data.pipeline.input_pipeline import encode_captions, word_table
from keras_saat.text import Vocabulary
from keras_saat.text.tokenizer import _normalize_unicode, normalize, tokenize, tokenize_graph

TRICKY = [
    "A child in a pink dress is climbing up a set of stairs in an entry way .",
    "A man's T-shirt, on a café table.",
    "Two dogs--one black--play in the snow!",
    "ＦＵＬＬＷＩＤＴＨ letters and ＡＢＣ？",
    "don't stop—now   please\tthanks",
    "Émile's « quoted » words… and 3 $5 bills + 100%",
    "",
    "   ",
]


@pytest.mark.parametrize("text", TRICKY)
def test_graph_and_python_tokenisers_agree(text):
    graph = [t.decode("utf-8") for t in tokenize_graph(tf.constant([text])).to_list()[0]]
    assert graph == tokenize(text)


def test_the_ascii_path_equals_the_unicode_rules():
    """Every ASCII character, alone and in a caption: the fast path changes nothing."""
    every = "".join(chr(c) for c in range(128))
    for text in [every, *every, *(t for t in TRICKY if t.isascii())]:
        assert normalize(text) == _normalize_unicode(text), repr(text)


def test_karpathy_style_tokens():
    # Raw captions as written in Flickr8k / COCO and the tokens Karpathy's files give for them.
    assert (
        tokenize(TRICKY[0])
        == "a child in a pink dress is climbing up a set of stairs in an entry way".split()
    )
    assert tokenize("A man with a red helmet on a small moped on a dirt road. ") == (
        "a man with a red helmet on a small moped on a dirt road".split()
    )
    assert tokenize(TRICKY[1]) == ["a", "mans", "tshirt", "on", "a", "café", "table"]
    assert tokenize(TRICKY[4]) == ["dont", "stop", "now", "please", "thanks"]
    assert tokenize(TRICKY[3]) == ["fullwidth", "letters", "and", "abc"]


def test_in_graph_encoding_matches_the_vocabulary():
    vocab = Vocabulary.build([tokenize(t) for t in TRICKY[:3]])
    captions = tf.constant(TRICKY[:3] + ["zz unseen zebra"])
    ids = encode_captions(captions, word_table(vocab), max_length=6).to_list()
    expected = [vocab.encode(tokenize(t.decode()), max_length=6) for t in captions.numpy()]
    assert ids == expected
    assert ids[3][1:-1] == [1, 1, 1]  # <unk>
    np.testing.assert_array_equal([row[0] for row in ids], 2)
