"""What the input pipeline asks of where a batch's image side comes from: `ImageFiles`,
`FeatureCache` or `ResidentFeatures`. Callers ask the source, never which one it is."""

from typing import Protocol


class FeatureSource(Protocol):
    """The few methods every feature source answers.

    Attributes:
        streams: bool. Whether an epoch reads the features from disk (then per-image
            batches read each image once: `data.batching` auto).
        pads_partial_batches: bool. Whether a plan's `pad_remainder` pads a partial batch
            (features) or drops it (decoded images, which would reach a training
            backbone's batch statistics).
        cache: FeatureCache or None. The cache whose rows the source holds.
    """

    streams: bool
    pads_partial_batches: bool
    cache: object

    def shard_positions(self, split, records):
        """Each shard's image positions in the order it holds them (int32 arrays)."""

    def planned_batches(self, split, records, batches, windows, tokens, plan):
        """tf.data of a plan's batches: {"features" | "image_index" | "images", "tokens"}.

        Args:
            split: str.
            records: list of ImageRecord. The split's records.
            batches: dict of tensors, one row a batch: "positions", "rows", "sizes",
                "widths", "local" (`planned_batches.plan_arrays`).
            windows: dict of tensors: the plan's windows of shards ("window_*").
            tokens: callable (rows, size, width) -> the batch's token rows.
            plan: BatchPlan.
        """

    def evaluation_batches(self, split, records, batch_size, positions=None):
        """Per-image batches for decoding: {"position", "features" | "images"}; only the
        images at `positions` when given."""

    def skipped(self, split):
        """[(position, reason), ...] of the split's images known to be unreadable."""

    def shard_files(self, splits):
        """The shard files that reading `splits` opens (named when one is damaged)."""
