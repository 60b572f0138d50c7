"""Decoding over a `next_fn(tokens, state) -> (logits, state)` callable."""

from keras_saat.decoding.beam import beam_search, tile_beams
from keras_saat.decoding.greedy import greedy_search

__all__ = ["beam_search", "greedy_search", "tile_beams"]
