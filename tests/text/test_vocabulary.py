import keras
import numpy as np
import pytest

from keras_saat.errors import KerasSaatError
from keras_saat.text import END_ID, PAD_ID, SPECIAL_TOKENS, START_ID, UNK_ID, Vocabulary

CAPTIONS = [["a", "red", "circle"], ["a", "blue", "circle"], ["a", "red", "square"], ["a", "odd"]]


def test_build_orders_by_count_then_alphabet_and_applies_top_k_and_min_count():
    vocab = Vocabulary.build(CAPTIONS)
    assert vocab.words == [*SPECIAL_TOKENS, "a", "circle", "red", "blue", "odd", "square"]
    assert Vocabulary.build(CAPTIONS, max_size=6).words == [*SPECIAL_TOKENS, "a", "circle"]
    assert Vocabulary.build(CAPTIONS, min_count=2).words == [*SPECIAL_TOKENS, "a", "circle", "red"]


def test_encode_decode_and_unknown_words():
    vocab = Vocabulary.build(CAPTIONS, min_count=2)
    ids = vocab.encode(["a", "green", "circle"])
    assert ids == [START_ID, vocab.word_id("a"), UNK_ID, vocab.word_id("circle"), END_ID]
    assert vocab.decode(ids + [PAD_ID]) == ["a", "<unk>", "circle"]
    batch = vocab.encode_batch([["a"], ["a", "red", "circle", "red"]], max_length=3)
    assert batch.shape == (2, 5) and batch[0, 3] == PAD_ID and batch[1, -1] == END_ID


def test_save_load_round_trip(tmp_path):
    vocab = Vocabulary.build(CAPTIONS)
    vocab.save(tmp_path / "vocab.txt")
    assert Vocabulary.load(tmp_path / "vocab.txt") == vocab


def test_ids_agree_with_keras_string_lookup():
    vocab = Vocabulary.build(CAPTIONS)
    lookup = keras.layers.StringLookup(
        vocabulary=vocab.words[2:], mask_token="<pad>", oov_token="<unk>"
    )
    words = ["<pad>", "a", "zebra", "<start>", "<end>", "square"]
    np.testing.assert_array_equal(lookup(words), [vocab.word_id(w) for w in words])


def test_bad_vocabulary_files_are_clear_errors(tmp_path):
    with pytest.raises(KerasSaatError, match="vocabulary file not found"):
        Vocabulary.load(tmp_path / "none.txt")
    (tmp_path / "v.txt").write_text("a\nb\n")
    with pytest.raises(KerasSaatError, match="must start with"):
        Vocabulary.load(tmp_path / "v.txt")
