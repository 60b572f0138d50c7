"""Corpus BLEU-1..4 with nltk (Papineni et al., 2002), on the 0-1 scale."""

import warnings

_WEIGHTS = {n: (1 / n,) * n for n in range(1, 5)}  # BLEU-n: uniform over 1..n-grams


def corpus_bleu_scores(references, hypotheses):
    """BLEU-1..4 over a corpus, no smoothing (as the COCO caption scorer).

    Args:
        references: list of list of list of str. Each image's tokenised reference captions.
        hypotheses: list of list of str. Each image's generated caption, tokenised.

    Returns:
        dict bleu_1 .. bleu_4 -> float in [0, 1].
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} reference sets but {len(hypotheses)} hypotheses")
    if not hypotheses:
        raise ValueError("no captions to score")
    # Imported here: nltk is slow to import, and most importers of this module never score.
    from nltk.translate.bleu_score import corpus_bleu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nltk warns when a higher-order n-gram never matches
        return {
            f"bleu_{n}": float(corpus_bleu(references, hypotheses, weights=weights))
            for n, weights in _WEIGHTS.items()
        }
