"""BatchDecoder: captions rows of pixels or backbone features at one fixed batch shape,
padding a short last batch with zero rows so a run compiles once."""

import tensorflow as tf

from keras_saat.config import DecodeConfig
from keras_saat.errors import KerasSaatError


class BatchDecoder:
    """Encodes (when given pixels), decodes and postprocesses batches of a fixed size.

    Args:
        model: Captioner.
        batch_size: int or None. Rows per compiled call. Defaults to None, the default
            of `decode.batch_size` (`DecodeConfig`).
        max_length: int or None. Maximum words. Defaults to None, the model's own.
        beam_size: int or None. Beam width (1: greedy). Defaults to None, the model's own.
        length_penalty: float or None. Defaults to None, the model's own.
    """

    def __init__(
        self, model, batch_size=None, max_length=None, beam_size=None, length_penalty=None
    ):
        self.model = model
        self.batch_size = int(DecodeConfig.batch_size if batch_size is None else batch_size)
        if self.batch_size < 1:
            raise KerasSaatError(f"batch_size must be at least 1; got {batch_size}")
        self.max_length = max_length
        self.beam_size = model.beam_size if beam_size is None else int(beam_size)
        self.length_penalty = model.length_penalty if length_penalty is None else length_penalty
        self.width = None  # the run's compiled batch size: its first batch's rows

    def __call__(self, pixels=None, features=None):
        """The postprocessor's caption dicts (caption, words, log_prob, attention), one per
        row of `pixels` (B, S, S, 3) in [0, 255] or `features` (B, L, C), any B."""
        if (pixels is None) == (features is None):
            raise KerasSaatError("BatchDecoder takes exactly one of pixels= or features=")
        rows = features if pixels is None else pixels
        results = []
        for start in range(0, int(rows.shape[0]), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            results += self.decode_batch(chunk, encode=pixels is not None)
        return results

    def decode_batch(self, chunk, encode):
        """Caption dicts of at most `batch_size` rows, decoded as one batch of the run's width."""
        chunk = tf.cast(chunk, tf.float32)
        count = int(chunk.shape[0])
        self.width = self.width or count
        # Zero rows up to the compiled shape; a batch wider than the first (a stream's first
        # batch cut short by its byte budget) runs at its own width.
        padding = max(self.width - count, 0)
        chunk = tf.pad(chunk, [[0, padding]] + [[0, 0]] * (len(chunk.shape) - 1))
        features = self.model.encoder.compiled()(chunk) if encode else chunk
        decoded = self.model.decode(features, self.max_length, self.beam_size, self.length_penalty)
        return self.model.postprocessor({key: value[:count] for key, value in decoded.items()})
