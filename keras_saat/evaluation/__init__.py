"""Caption metrics."""

from keras_saat.evaluation.bleu import corpus_bleu_scores

__all__ = ["corpus_bleu_scores"]
