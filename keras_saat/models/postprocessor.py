"""CaptionPostprocessor: decoded ids -> words, caption strings and attention grids."""

import numpy as np


class CaptionPostprocessor:
    """Reads `Captioner.decode` output back as words and per-word attention maps.

    Args:
        vocabulary: keras_saat.text.Vocabulary.
        grid_shape: (grid_h, grid_w). The backbone's feature grid, L = grid_h * grid_w.

    Example:
        ```python
        results = model.postprocessor(model.decode(features))  # model: a Captioner
        results[0]["caption"], results[0]["attention"].shape  # words; (steps, grid_h, grid_w)
        ```
    """

    def __init__(self, vocabulary, grid_shape):
        self.vocabulary = vocabulary
        self.grid_shape = tuple(grid_shape)

    def words(self, tokens):
        """Caption word lists from id rows (B, T), each stopping at <end>."""
        return [self.vocabulary.decode(row) for row in np.asarray(tokens)]

    def captions(self, tokens):
        """Caption strings from id rows (B, T)."""
        return [" ".join(words) for words in self.words(tokens)]

    def attention_grid(self, alpha, length):
        """One caption's attention (T, L) as (length, grid_h, grid_w): the steps it generated."""
        return np.asarray(alpha)[:length].reshape(length, *self.grid_shape)

    def __call__(self, decoded):
        """A dict per caption: caption, words, log_prob, attention (steps, grid_h, grid_w),
        novelty and familiar (novelty not above 1, or NaN).

        Args:
            decoded: dict of tokens (B, T), lengths (B,), log_prob (B,), alpha (B, T, L)
                and novelty (B,), tensors or arrays (`Captioner.decode`).
        """
        keys = ("tokens", "lengths", "log_prob", "alpha", "novelty")
        decoded = {k: np.asarray(decoded[k]) for k in keys}
        results = []
        for row, words in enumerate(self.words(decoded["tokens"])):
            novelty = float(decoded["novelty"][row])
            attention = self.attention_grid(decoded["alpha"][row], int(decoded["lengths"][row]))
            results.append(
                {
                    "caption": " ".join(words),
                    "words": words,
                    "log_prob": float(decoded["log_prob"][row]),
                    "attention": attention,
                    "novelty": novelty,
                    "familiar": not novelty > 1.0,
                }
            )
        return results
