"""Start-up tokenises each caption once: the readers' empty check does not tokenise a
caption with an ASCII letter or digit, and the vocabulary tokenises every one."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_saat.config import from_dict
from keras_saat.data.readers import caption_dataset as dataset_module
from keras_saat.data.readers.karpathy import read_karpathy
from keras_saat.experiment.preparation import build_vocabulary
from keras_saat.text import tokenizer
from keras_saat.text.tokenizer import has_words, tokenize


@given(st.text(max_size=30))
def test_has_words_agrees_with_tokenize(text):
    assert has_words(text) == bool(tokenize(text))


@pytest.mark.parametrize("text", ["", "  ", "...", "—", "\u0301", "a", "Ünïcode", "１"])
def test_has_words_on_edge_cases(text):
    assert has_words(text) == bool(tokenize(text))


def test_reading_and_the_vocabulary_tokenise_each_caption_once(shapes_dir, tmp_path, monkeypatch):
    calls = []
    real = tokenizer.tokenize

    def counted(text):
        calls.append(text)
        return real(text)

    monkeypatch.setattr(tokenizer, "tokenize", counted)
    monkeypatch.setattr(dataset_module, "tokenize", counted)
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    build_vocabulary(from_dict({}).data, dataset, tmp_path, log=lambda line: None)
    train = [c for r in dataset.split("train") for c in r.captions]
    assert len(calls) == len(train)
