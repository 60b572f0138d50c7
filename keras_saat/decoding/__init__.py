"""Decoding over a `next_fn(tokens, state) -> (logits, state)` callable."""

from keras_saat.decoding.greedy import greedy_search

__all__ = ["greedy_search"]
