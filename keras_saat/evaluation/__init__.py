"""Caption metrics (nltk BLEU, pycocoevalcap's COCO metrics), attention localisation and plots."""

from keras_saat.evaluation.bleu import corpus_bleu_scores
from keras_saat.evaluation.coco_metrics import bleu_scores, coco_scores
from keras_saat.evaluation.localisation import attention_localisation

__all__ = ["attention_localisation", "bleu_scores", "coco_scores", "corpus_bleu_scores"]
