"""Karpathy-style caption tokens (neuraltalk's preprocessing), in Python (`tokenize`) and
in the tf.data graph (`tokenize_graph`, with tensorflow-text): NFKC, lowercase, ASCII
punctuation deleted ("t-shirt" -> "tshirt"), other Unicode punctuation or symbols a space,
split on whitespace."""

import re
import string
import unicodedata

import tensorflow as tf

# The ASCII punctuation class in RE2 syntax (inside [...]): !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
_ASCII_PUNCT_RE2 = r"[!-/:-@\[-`{-~]"
_OTHER_PUNCT_RE2 = r"[\p{P}\p{S}]"
_ASCII_PUNCT = str.maketrans("", "", string.punctuation)
_ASCII_WORD = re.compile("[A-Za-z0-9]")


def normalize(text):
    """The normalised caption string (Python)."""
    if text.isascii():
        # NFKC leaves ASCII as it is, and every ASCII punctuation mark or symbol is in
        # string.punctuation: the per-character pass below would change nothing.
        return text.lower().translate(_ASCII_PUNCT)
    return _normalize_unicode(text)


def _normalize_unicode(text):
    text = unicodedata.normalize("NFKC", text).lower().translate(_ASCII_PUNCT)
    return "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)


def tokenize(text):
    """Karpathy-style tokens of one caption (Python)."""
    return normalize(text).split()


def has_words(text):
    """Whether `tokenize(text)` has a token; an ASCII letter or digit always survives
    normalisation, so only captions without one are tokenised."""
    return _ASCII_WORD.search(text) is not None or bool(tokenize(text))


def normalize_graph(captions):
    """`normalize` as TF ops: a string tensor of any shape -> the same shape."""
    import tensorflow_text as tf_text  # imported here: serving graphs never need it

    captions = tf_text.normalize_utf8(captions, "NFKC")
    captions = tf.strings.lower(captions, encoding="utf-8")
    captions = tf.strings.regex_replace(captions, _ASCII_PUNCT_RE2, "")
    return tf.strings.regex_replace(captions, _OTHER_PUNCT_RE2, " ")


def tokenize_graph(captions):
    """`tokenize` as TF ops: (N,) strings -> (N, None) ragged tokens."""
    import tensorflow_text as tf_text

    return tf_text.WhitespaceTokenizer().tokenize(normalize_graph(captions))
