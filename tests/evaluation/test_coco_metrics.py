"""The project's BLEU against pycocoevalcap's on the same predictions, and the COCO metrics."""

import numpy as np
import pytest

from keras_saat.data.shapes import reference_captions, sample_objects
from keras_saat.evaluation.bleu import corpus_bleu_scores
from keras_saat.evaluation.coco_metrics import bleu_scores, coco_scores, java_available


def shapes_predictions(n=60, seed=0):
    """Reference captions of random scenes and imperfect predictions (words dropped or swapped)."""
    rng = np.random.default_rng(seed)
    references, hypotheses = [], []
    for _ in range(n):
        refs = reference_captions(sample_objects(rng))
        words = refs[int(rng.integers(5))].split()
        if rng.random() < 0.5:
            del words[int(rng.integers(len(words)))]
        if rng.random() < 0.5:
            words[int(rng.integers(len(words)))] = str(rng.choice(["red", "circle", "above"]))
        references.append(refs)
        hypotheses.append(" ".join(words))
    return references, hypotheses


def test_nltk_corpus_bleu_equals_pycocoevalcap_bleu():
    references, hypotheses = shapes_predictions()
    tokens = [[r.split() for r in refs] for refs in references]
    ours = corpus_bleu_scores(tokens, [h.split() for h in hypotheses])
    coco = bleu_scores(tokens, [h.split() for h in hypotheses])
    assert 0.3 < coco["bleu_4"] < 0.95  # imperfect, not degenerate
    for n in range(1, 5):
        # Same n-gram clipping and closest-length brevity penalty; pycocoevalcap adds 1e-9
        # smoothing inside its precisions.
        assert ours[f"bleu_{n}"] == pytest.approx(coco[f"bleu_{n}"], abs=1e-6)


def test_coco_scores_without_java_use_our_tokens_and_skip_meteor():
    references, hypotheses = shapes_predictions(20, seed=1)
    scores = coco_scores(references, hypotheses, use_java=False)
    assert scores["tokenizer"] == "keras_saat" and "meteor" not in scores
    bleu = bleu_scores(
        [[r.split() for r in refs] for refs in references], [h.split() for h in hypotheses]
    )
    for n in range(1, 5):
        assert scores[f"bleu_{n}"] == pytest.approx(bleu[f"bleu_{n}"])
    assert 0.0 < scores["rouge_l"] <= 1.0 and scores["cider"] > 0.0
    perfect = coco_scores(references, [refs[0] for refs in references], use_java=False)
    assert perfect["bleu_4"] == pytest.approx(1.0, abs=1e-6)
    assert perfect["cider"] > scores["cider"]


@pytest.mark.slow
@pytest.mark.skipif(not java_available(), reason="METEOR and the PTB tokenizer need Java")
def test_coco_scores_with_java_tokenise_like_coco_and_add_meteor_unless_told():
    references, hypotheses = shapes_predictions(20, seed=2)
    # PTB tokenisation lowercases and drops punctuation: these must score as the plain captions.
    shouting = [h.upper() + "." for h in hypotheses]
    scores = coco_scores(references, shouting, use_java=True)
    plain = coco_scores(references, hypotheses, use_java=False)
    assert scores["tokenizer"] == "ptb" and 0.0 < scores["meteor"] <= 1.0
    quiet = coco_scores(references, shouting, use_java=True, meteor=False)  # decode.meteor
    assert quiet == {k: v for k, v in scores.items() if k != "meteor"}
    for key in ("bleu_4", "rouge_l", "cider"):
        assert scores[key] == pytest.approx(plain[key], rel=1e-6)
    empty = coco_scores(references[:2], ["", "a red circle"], use_java=True)
    assert 0.0 <= empty["bleu_1"] <= 1.0  # an empty caption scores, it does not crash
