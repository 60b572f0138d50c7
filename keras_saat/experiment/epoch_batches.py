"""A run's batches: how many steps an epoch holds, their shape, and each epoch's dataset."""

import dataclasses

from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.input_pipeline import (
    caption_batches,
    captions_per_image,
    image_group_count,
    token_table,
)
from keras_saat.errors import KerasSaatError


@dataclasses.dataclass(frozen=True)
class EpochBatches:
    """The batches of a run's epochs.

    `steps` counts the batches of the whole train split (with `pad`, the last partial one
    too); `units` the rows a batch (captions, or image groups of `per_image` caption rows;
    None: per-caption batches); `captions` the readable training captions; `text` is the
    batch shape in words, for the training line.
    """

    steps: int
    units: int
    per_image: int | None
    captions: int
    text: str
    pad: bool = True

    @property
    def mode(self):
        return "per_caption" if self.per_image is None else "per_image"

    @property
    def captions_per_batch(self):
        return self.units * (self.per_image or 1)

    def plan(self, data, seed, start_step=0):
        """The `BatchPlan` of one epoch (`data`: the run's DataConfig)."""
        options = {"seed": seed, "start_step": start_step, "pad_remainder": self.pad}
        if self.per_image is None:
            options.update(
                shuffle_buffer=data.shuffle_buffer, bucket_by_length=data.bucket_by_length
            )
        else:
            options.update(shuffle_buffer=max(data.shuffle_buffer // self.per_image, 1))
            options.update(per_image=self.per_image)
        return BatchPlan(self.units, **options)


def _batch_count(units, size, pad):
    """Batches of `size` in `units`: the last partial one counted when padded."""
    return -(-units // size) if pad else units // size


def batching_mode(data, source):
    """`data.batching` with "auto" resolved: per_image where the features stream from the
    cache (each image read once, not once per caption), else per_caption."""
    if data.batching != "auto":
        return data.batching
    return "per_image" if source.streams and not data.bucket_by_length else "per_caption"


def batching(config, records, source, replicas):
    """The `EpochBatches` of `data.batching` over the train split's readable `records`. An
    epoch's plan cuts batches window by window, so it may hold a few more steps ("pad") or
    fewer ("drop") than the whole split's count."""
    batch_size, data = config.train.batch_size, config.data
    pad = data.partial_batches == "pad" and source.pads_partial_batches
    unreadable = {p for p, _ in source.skipped("train")}
    captions = sum(len(r.captions) for p, r in enumerate(records) if p not in unreadable)
    mode = batching_mode(data, source)
    if mode == "per_image":
        if data.bucket_by_length:
            raise KerasSaatError(
                "data.bucket_by_length batches captions by length, which per-image batches "
                "cannot: set data.batching per_caption or data.bucket_by_length false"
            )
        per_image = captions_per_image(records)
        images_per_batch = max(batch_size // per_image, 1)
        groups = image_group_count(records, per_image, unreadable)
        steps, units = _batch_count(groups, images_per_batch, pad), images_per_batch
        text = f"per-image batches of {images_per_batch} images x {per_image} captions"
        if data.batching == "auto":
            text += " (data.batching auto: the features stream from the cache)"
    else:
        per_image, units, text = None, batch_size, f"batch {batch_size}"
        steps = _batch_count(captions, batch_size, pad)
    if steps == 0:
        fix = ": lower train.batch_size"
        if not pad and source.pads_partial_batches:
            fix += " or set data.partial_batches pad"
        raise KerasSaatError(
            f"only {captions} training captions for a batch size of {batch_size} ({text}){fix}"
        )
    if units % replicas:
        raise KerasSaatError(
            f"train.batch_size {batch_size} ({text}) does not split evenly over {replicas} replicas"
        )
    if not pad:
        text += ", partial batches dropped"
    return EpochBatches(steps, units, per_image, captions, text, pad)


def epoch_datasets(config, dataset, vocabulary, source, batches):
    """`(epoch, start_step) -> tf.data.Dataset` of an epoch's training batches from batch
    `start_step` on, in an order fixed by the seed and the epoch; captions are tokenised once."""
    records = dataset.split("train")
    tokens = []  # the token table, built at the first epoch

    def epoch_dataset(epoch, start_step=0):
        seed = config.train.seed * 1009 + epoch
        if not tokens:
            tokens.append(token_table(records, vocabulary, config.data.max_length))
        plan = batches.plan(config.data, seed, start_step)
        return caption_batches(source, "train", records, tokens[0], plan)

    return epoch_dataset
