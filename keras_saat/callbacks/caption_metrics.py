"""CaptionMetrics: BLEU-1..4, ROUGE-L and CIDEr of validation captions after each epoch."""

from pathlib import Path

import keras
import numpy as np

from keras_saat.errors import KerasSaatError


class CaptionMetrics(keras.callbacks.Callback):
    """Captions validation images after each epoch and puts their scores into `logs`:
    `val_bleu1` .. `val_bleu4`, `val_rouge_l` and `val_cider` (0-1, pycocoevalcap without
    Java, so no METEOR), for the callbacks after this one (ModelCheckpoint, ...).

        model.fit(data, epochs=10, callbacks=[
            CaptionMetrics(dataset.split("val"), log_dir="logs"),
            keras.callbacks.ModelCheckpoint("best.keras", monitor="val_bleu4", mode="max",
                                            save_best_only=True),
        ])

    Args:
        val_data: records with `path` and `captions` (`dataset.split("val")`), or a tuple
            (images, references): what `Captioner.generate` takes (paths, bytes or
            pixels) and one list of reference strings per image.
        beam_size: int. Beam width; 1 is greedy decoding (the fastest). Defaults to 1.
        batch_size: int or None. Images per decoding batch. Defaults to None
            (`decode.batch_size`'s default).
        every: int. Epochs between evaluations (the last epoch counts too). Defaults to 1.
        log_dir: str or Path or None. Also write the scores (tag `val/<name>`, step = the
            epoch) and the attention strips of `images` validation images to TensorBoard
            here. Defaults to None.
        images: int. Validation images whose attention goes to TensorBoard. Defaults to 2.
        caption_fn: callable(model) -> {index: caption} of the images it captioned.
            Defaults to None (`model.generate`, unreadable images left out).

    Attributes:
        scores: dict of the last evaluation's scores (bleu_1 .. bleu_4, rouge_l, cider).
    """

    def __init__(
        self,
        val_data,
        beam_size=1,
        batch_size=None,
        every=1,
        log_dir=None,
        images=2,
        caption_fn=None,
    ):
        super().__init__()
        self.images, self.references = _split_val_data(val_data)
        self.beam_size = int(beam_size)
        self.batch_size = batch_size
        self.every = max(int(every), 1)
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.summary_images = int(images)
        self.caption_fn = caption_fn
        self.scores = {}
        self._writer = None

    def captions(self, model):
        """{index: caption} of the validation images `model` could caption."""
        if self.caption_fn is not None:
            return self.caption_fn(model)
        results = model.generate(
            self.images, beam_size=self.beam_size, batch_size=self.batch_size, errors="skip"
        )
        return {i: c for i, c in enumerate(results) if c is not None}

    def evaluate(self, model):
        """The scores (0-1) of `model`'s captions: bleu_1 .. bleu_4, rouge_l, cider."""
        from keras_saat.evaluation.coco_metrics import coco_scores

        captions = self.captions(model)
        if not captions:
            raise KerasSaatError("CaptionMetrics: none of the validation images could be read")
        order = sorted(captions)
        references = [self.references[i] for i in order]
        scores = coco_scores(references, [captions[i] for i in order], use_java=False)
        scores.pop("tokenizer")
        return scores

    def due(self, epoch):
        """Whether epoch `epoch` (from 0) is validated: every `every`-th, and the last."""
        last = self.params.get("epochs") if self.params else None
        return not (epoch + 1) % self.every or epoch + 1 == last

    def on_epoch_end(self, epoch, logs=None):
        if not self.due(epoch):
            return
        self.scores = self.evaluate(self.model)
        if logs is not None:
            # bleu_4 -> val_bleu4, cider -> val_cider
            logs.update({"val_" + k.replace("bleu_", "bleu"): v for k, v in self.scores.items()})
        if self.log_dir is not None:
            self._summaries(epoch + 1)

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _summaries(self, step):
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.log_dir))
        with self._writer.as_default(step=step):
            for key, value in self.scores.items():
                tf.summary.scalar(f"val/{key}", float(value))
            for i, (caption, strip) in enumerate(self.attention_strips()):
                tf.summary.image(f"attention/{i}", strip[None], description=caption)
        self._writer.flush()

    def attention_strips(self):
        """(caption, strip (H, W, 3) in [0, 1]) of the first `images` validation images."""
        from keras_saat.evaluation.attention_maps import attention_strip

        if self.summary_images <= 0 or self.model is None:
            return []
        images = self.images[: self.summary_images]
        details = self.model.generate(images, return_details=True, errors="skip", beam_size=1)
        good = [(image, d) for image, d in zip(images, details, strict=True) if not d["error"]]
        if not good:
            return []
        pixels = self.model.preprocessor()([image for image, _ in good])
        return [
            (f"{d['image']}: {d['caption']}", attention_strip(p, d["attention"], 64))
            for (_, d), p in zip(good, pixels, strict=True)
        ]


def _split_val_data(val_data):
    """(images, references) from records or an (images, references) tuple."""
    if isinstance(val_data, tuple) and len(val_data) == 2:
        images, references = val_data
        if isinstance(images, np.ndarray):
            images = list(images) if images.ndim == 4 else [images]
        images, references = list(images), [list(r) for r in references]
    else:
        records = list(val_data)
        if not records or not all(hasattr(r, "path") and hasattr(r, "captions") for r in records):
            raise KerasSaatError(
                "CaptionMetrics takes records with .path and .captions (dataset.split('val')) "
                "or a tuple (images, references)"
            )
        images, references = [r.path for r in records], [list(r.captions) for r in records]
    if len(images) != len(references) or not images:
        raise KerasSaatError(
            f"CaptionMetrics: {len(images)} images for {len(references)} reference lists; "
            "give one list of reference captions per image"
        )
    if any(isinstance(r, str) for r in references):
        raise KerasSaatError("CaptionMetrics: each image's references must be a list of strings")
    return images, references
