"""How an epoch's caption batches are cut: one frozen value the pipeline reads."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """The shape and order of an epoch's batches (`input_pipeline.caption_batches`).

    Args:
        batch_size: int. Captions a batch; with `per_image`, images (groups) a batch.
        per_image: int or None. k: each image's features once beside k caption rows.
            Defaults to None (one caption a row).
        shuffle_buffer: int. Units (captions or groups) shuffled together: seeded shards
            in windows of at least this many units, each window permuted (0: the cache's
            order). Defaults to 5000.
        seed: int, list or None. The epoch's order is a function of it alone. Defaults
            to None.
        bucket_by_length: bool. Batch captions of similar length together (per caption
            only). Defaults to False.
        drop_remainder: bool. Drop each window's (and bucket's) last partial batch.
            Defaults to True.
        pad_remainder: bool. Pad a last partial batch to full size with rows that weigh
            nothing, so every unit trains once at one static shape; decoded images drop
            it instead (padding would reach a backbone's batch statistics). Defaults to
            False.
        repeat: bool. Repeat forever, reshuffling each pass. Defaults to False.
        start_step: int. The first batch (a resumed epoch's step); earlier batches are
            never built nor their windows read. Defaults to 0.
    """

    batch_size: int
    per_image: int | None = None
    shuffle_buffer: int = 5000
    seed: object = None
    bucket_by_length: bool = False
    drop_remainder: bool = True
    pad_remainder: bool = False
    repeat: bool = False
    start_step: int = 0

    def __post_init__(self):
        if self.per_image is not None and self.bucket_by_length:
            raise ValueError("per-image groups are not bucketed by caption length")
        if self.pad_remainder:  # what becomes of a partial batch: padded, not dropped
            object.__setattr__(self, "drop_remainder", False)

    @property
    def sliced(self):
        """Whether a partial batch is kept at its own size (a smaller batch)."""
        return not self.drop_remainder and not self.pad_remainder

    @property
    def float_images(self):
        """Whether decoded images travel as float32 (per caption), not uint8 (per image)."""
        return self.per_image is None
