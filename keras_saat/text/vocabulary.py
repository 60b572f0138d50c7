"""The caption vocabulary: special tokens, top-K / min-count selection, a text file."""

import collections
import itertools
from pathlib import Path

import numpy as np

from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import write_text_atomic

PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN = "<pad>", "<unk>", "<start>", "<end>"
# The order matches keras.layers.StringLookup(mask_token="<pad>", oov_token="<unk>"),
# so the in-graph lookup and this class give the same ids.
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN)
PAD_ID, UNK_ID, START_ID, END_ID = range(4)


class Vocabulary:
    """Maps words to ids and back.

    Ids 0-3 are `<pad>`, `<unk>`, `<start>`, `<end>`; words follow by decreasing
    count in the training captions (ties alphabetical, so a build is deterministic).

    Args:
        words: list of str. Every token in id order, starting with the special tokens.

    Example:
        ```python
        from keras_saat import Vocabulary

        vocabulary = Vocabulary.build([["a", "red", "circle"], ["a", "blue", "square"]])
        ids = vocabulary.encode(["a", "red", "square"])  # <start> a red square <end>
        vocabulary.decode(ids)  # ["a", "red", "square"]
        ```
    """

    def __init__(self, words):
        words = [str(w) for w in words]
        if tuple(words[:4]) != SPECIAL_TOKENS:
            raise KerasSaatError(
                f"a vocabulary must start with {', '.join(SPECIAL_TOKENS)}; got {words[:4]}"
            )
        if len(set(words)) != len(words):
            dupes = sorted(w for w, n in collections.Counter(words).items() if n > 1)
            raise KerasSaatError(f"vocabulary has duplicate tokens: {dupes[:5]}")
        self.words = words
        self._ids = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, captions, max_size=None, min_count=1):
        """Builds a vocabulary from tokenised captions.

        Args:
            captions: iterable of lists of str. Training captions, already tokenised.
            max_size: int or None. Total size including the 4 special tokens. Defaults to None (all words).
            min_count: int. Words seen fewer times are left out. Defaults to 1.
        """
        counts = collections.Counter(w for caption in captions for w in caption)
        kept = (w for w, n in counts.items() if n >= min_count and w not in SPECIAL_TOKENS)
        ranked = sorted(kept, key=lambda w: (-counts[w], w))
        if max_size is not None:
            if max_size <= len(SPECIAL_TOKENS):
                raise KerasSaatError(
                    f"vocab_size must be larger than 4 (the special tokens); got {max_size}"
                )
            ranked = ranked[: max_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *ranked])

    @classmethod
    def from_records(cls, records, max_size=None, min_count=1):
        """Builds a vocabulary from the captions of records (`read_captions(...).train`).

        Args:
            records: iterable of ImageRecord (or anything with `references`, the
                tokenised captions).
            max_size: int or None. As in `build`. Defaults to None (all words).
            min_count: int. As in `build`. Defaults to 1.
        """
        return cls.build((tokens for r in records for tokens in r.references), max_size, min_count)

    @classmethod
    def load(cls, path, max_words=None, max_bytes=None):
        """Reads a vocabulary file: one token per line, in id order.

        Args:
            path: str or Path.
            max_words: int or None. More lines than this is an error. Defaults to None.
            max_bytes: int or None. A larger file is an error, before it is read.
                Defaults to None.
        """
        path = Path(path)
        if not path.is_file():
            raise KerasSaatError(f"vocabulary file not found: {path}")
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise KerasSaatError(
                f"vocabulary file {path} is {size} bytes, over the {max_bytes} allowed here"
            )
        try:
            with path.open(encoding="utf-8") as file:  # at most one line past max_words
                read = itertools.islice(file, None if max_words is None else max_words + 1)
                lines = [line.rstrip("\r\n") for line in read]
        except UnicodeDecodeError as err:
            raise KerasSaatError(f"vocabulary file {path} is not UTF-8 text: {err}") from None
        if max_words is not None and len(lines) > max_words:
            raise KerasSaatError(
                f"vocabulary file {path} has over {max_words} lines, the most allowed here"
            )
        try:
            return cls(lines)
        except KerasSaatError as err:
            raise KerasSaatError(f"{path}: {err}") from None

    def save(self, path):
        """Writes one token per line, in id order."""
        write_text_atomic(path, "\n".join(self.words) + "\n")

    def __len__(self):
        return len(self.words)

    def __contains__(self, word):
        return word in self._ids

    def __eq__(self, other):
        return isinstance(other, Vocabulary) and self.words == other.words

    def word_id(self, word):
        return self._ids.get(word, UNK_ID)

    def encode(self, tokens, max_length=None):
        """`<start> w1 .. wn <end>` as ids; words past `max_length` are dropped."""
        tokens = list(tokens)[:max_length]  # [:None] keeps them all
        return [START_ID, *(self.word_id(w) for w in tokens), END_ID]

    def encode_batch(self, captions, max_length):
        """(N, max_length + 2) int32 array of `encode` results, padded with <pad>."""
        out = np.full((len(captions), max_length + 2), PAD_ID, dtype=np.int32)
        for row, caption in enumerate(captions):
            ids = self.encode(caption, max_length)
            out[row, : len(ids)] = ids
        return out

    def decode(self, ids):
        """Words of an id sequence, stopping at <end>, skipping <start> and <pad>."""
        ended = itertools.takewhile(lambda i: i != END_ID, (int(i) for i in ids))
        return [
            self.words[i] if 0 <= i < len(self.words) else UNK_TOKEN
            for i in ended
            if i not in (PAD_ID, START_ID)
        ]
