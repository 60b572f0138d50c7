"""Vocabulary and tokenisation."""

from keras_saat.text.vocabulary import (
    END_ID,
    END_TOKEN,
    PAD_ID,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    START_ID,
    START_TOKEN,
    UNK_ID,
    UNK_TOKEN,
    Vocabulary,
)

__all__ = [
    "END_ID",
    "END_TOKEN",
    "PAD_ID",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "START_ID",
    "START_TOKEN",
    "UNK_ID",
    "UNK_TOKEN",
    "Vocabulary",
]
