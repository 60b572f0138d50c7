"""What the input pipeline asks of where a batch's image side comes from: `ImageFiles`,
`FeatureCache` or `ResidentFeatures`. Callers ask the source, never which one it is."""

from typing import Protocol


class FeatureSource(Protocol):
    """The few methods every feature source answers.

    Attributes:
        streams: bool. Whether an epoch reads the features from disk (`data.batching`
            auto then batches per image).
        pads_partial_batches: bool. Whether `pad_remainder` pads a partial batch or, for
            decoded images, drops it.
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
            batches: dict of tensors, one row a batch (`planned_batches.plan_arrays`).
            windows: dict of tensors: the plan's windows of shards ("window_*").
            tokens: callable (rows, size, width) -> the batch's token rows.
            plan: BatchPlan.
        """

    def evaluation_batches(self, split, records, batch_size, positions=None):
        """Per-image batches {"position", "features" | "images"}, only `positions` if given."""

    def skipped(self, split):
        """[(position, reason), ...] of the split's images known to be unreadable."""

    def shard_files(self, splits):
        """The shard files that reading `splits` opens (named when one is damaged)."""
