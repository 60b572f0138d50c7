"""COCO caption metrics with pycocoevalcap, the reference implementation papers report.

BLEU-1..4 (closest reference length, corpus level), METEOR 1.5 (Java), ROUGE-L and
CIDEr, as the COCO leaderboard computes them. With Java on the PATH the captions are
tokenised by the Stanford PTB tokenizer; without it, by keras-saat's own tokeniser, METEOR
is left out, and the result says so.

Scores are returned on the 0-1 scale; multiply by 100 for the paper's Table 1.
"""

import contextlib
import io
import shutil

from keras_saat.errors import KerasSaatError
from keras_saat.text.tokenizer import tokenize

METRIC_NAMES = ("bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "cider")
_LABELS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")
METRIC_LABELS = dict(zip(METRIC_NAMES, _LABELS, strict=True))


def format_metrics(metrics):
    """'BLEU-1 0.946  ...  CIDEr 8.123': the metrics present, on the scale they are
    stored and logged on (0-1; CIDEr's range is 0-10)."""
    return "  ".join(
        f"{label} {metrics[key]:.3f}" for key, label in METRIC_LABELS.items() if key in metrics
    )


def java_available():
    """True when a `java` executable is on the PATH (METEOR and the PTB tokenizer need it)."""
    return shutil.which("java") is not None


def _tokenized(references, hypotheses, use_java):
    """{i: [tokenised caption, ...]} for references and {i: [tokenised hypothesis]}."""
    if use_java:
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        tokenizer = PTBTokenizer()
        with contextlib.redirect_stdout(io.StringIO()):
            gts = tokenizer.tokenize(
                {i: [{"caption": c} for c in refs] for i, refs in enumerate(references)}
            )
            res = tokenizer.tokenize({i: [{"caption": h}] for i, h in enumerate(hypotheses)})
        return gts, res
    gts = {i: [" ".join(tokenize(c)) for c in refs] for i, refs in enumerate(references)}
    res = {i: [" ".join(tokenize(h))] for i, h in enumerate(hypotheses)}
    return gts, res


def bleu_scores(references, hypotheses):
    """pycocoevalcap BLEU-1..4 (no Java), {"bleu_1": .., "bleu_4": ..} in 0-1, of token
    lists: `references` a list of them per image, `hypotheses` one per image."""
    from pycocoevalcap.bleu.bleu import Bleu

    if not hypotheses:
        return {f"bleu_{n}": 0.0 for n in range(1, 5)}
    gts = {i: [" ".join(r) for r in refs] for i, refs in enumerate(references)}
    res = {i: [" ".join(h)] for i, h in enumerate(hypotheses)}
    with contextlib.redirect_stdout(io.StringIO()):
        scores, _ = Bleu(4).compute_score(gts, res, verbose=0)
    return {f"bleu_{n + 1}": float(s) for n, s in enumerate(scores)}


def coco_scores(references, hypotheses, use_java=None, meteor=True):
    """BLEU-1..4, METEOR, ROUGE-L and CIDEr of generated captions (0-1 scale).

    Args:
        references: list (per image) of list of reference caption strings.
        hypotheses: list (per image) of generated caption strings.
        use_java: bool or None. Use the PTB tokenizer and METEOR (Java); None: when
            `java` is on the PATH. Defaults to None.
        meteor: bool. Score METEOR when Java is used (it loads paraphrase tables at
            every call). Defaults to True.

    Returns:
        dict: the scores, plus "tokenizer" ("ptb" or "keras_saat"); "meteor" only when
        Java ran and `meteor` is true.
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    if len(references) != len(hypotheses):
        raise KerasSaatError(
            f"{len(hypotheses)} captions for {len(references)} images: one caption per image"
        )
    if not hypotheses:
        raise KerasSaatError("no captions to score")
    use_java = java_available() if use_java is None else use_java
    gts, res = _tokenized(references, hypotheses, use_java)
    # pycocoevalcap asserts a non-empty hypothesis list; an empty caption scores zero.
    res = {i: [h[0] if h and h[0] else ""] for i, h in res.items()}
    result = {}
    with contextlib.redirect_stdout(io.StringIO()):
        bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
        result.update({f"bleu_{n + 1}": float(s) for n, s in enumerate(bleu)})
        if use_java and meteor:
            from pycocoevalcap.meteor.meteor import Meteor

            scorer = Meteor()
            try:
                result["meteor"] = float(scorer.compute_score(gts, res)[0])
            finally:
                scorer.meteor_p.kill()
        result["rouge_l"] = float(Rouge().compute_score(gts, res)[0])
        result["cider"] = float(Cider().compute_score(gts, res)[0])
    result["tokenizer"] = "ptb" if use_java else "keras_saat"
    return result
