"""The accepted range of each numeric config key, and values shortened for messages.

An absurd value (0, negative, 2**63, nan) is one line naming the key and the range,
before TensorFlow wraps, overflows or crashes on it.
"""

import math
import reprlib

from keras_saat.errors import KerasSaatError

INT32_MAX = 2**31 - 1
# Inclusive (low, high); a third item True excludes the low end.
RANGES = {
    **dict.fromkeys(
        [("model", k) for k in ("embedding_dim", "lstm_units", "attention_units", "feature_dim")],
        (1, 16384),
    ),
    **dict.fromkeys([("decode", "batch_size"), ("train", "batch_size")], (1, 65536)),
    **dict.fromkeys([("data", "max_length"), ("decode", "max_length")], (1, 1000)),
    **dict.fromkeys(
        [("model", "seed"), ("data", "shapes_seed"), ("train", "seed")]
        + [("train", k) for k in ("warmup_steps", "patience", "checkpoint_every")],
        (0, INT32_MAX),
    ),
    **dict.fromkeys(
        [("model", k) for k in ("hard_soft_probability", "baseline_decay")]
        + [("train", "lr_final_fraction"), ("data", "shapes_varied")],
        (0.0, 1.0),
    ),
    **dict.fromkeys(
        [("model", k) for k in ("doubly_stochastic_lambda", "reinforce_weight", "entropy_weight")]
        + [("train", "clipnorm")],
        (0.0, 1e6),
    ),
    ("model", "dropout"): (0.0, 0.99),  # a rate of 1 scales the kept units by 1 / 0
    ("model", "image_size"): (0, 4096),
    ("model", "trainable_backbone_layers"): (0, 10000),
    ("data", "cache_shard_size"): (1, 1_000_000),
    ("data", "shuffle_buffer"): (0, 100_000_000),
    ("data", "val_images"): (1, 100_000_000),
    ("data", "resident_budget"): (0.0, 1.0, True),
    ("data", "vocab_size"): (5, 10_000_000),
    ("data", "min_count"): (1, INT32_MAX),
    ("data", "shapes_train"): (1, 10_000_000),
    **dict.fromkeys([("data", "shapes_val"), ("data", "shapes_test")], (0, 10_000_000)),
    ("train", "epochs"): (1, 1_000_000),
    ("train", "learning_rate"): (0.0, 10.0, True),
    ("train", "lr_decay_rate"): (0.0, 1.0, True),
    ("train", "max_checkpoints"): (1, 1000),
    ("train", "max_nonfinite_steps"): (1, INT32_MAX),
    ("train", "log_every"): (1, INT32_MAX),
    ("train", "summary_images"): (0, 1000),
    ("train", "validate_every"): (1, 1_000_000),
    ("train", "backbone_pretrain_epochs"): (0, 10000),
    ("train", "backbone_pretrain_scenes"): (0, 10_000_000),
    ("decode", "beam_size"): (1, 100),
    ("decode", "length_penalty"): (0.0, 10.0),
    ("export", "max_pixels"): (1, 1_000_000_000),
    ("export", "encoder_chunk"): (0, 65536),
}


def check_range(where, value, limits):
    """Refuses a number outside `limits` (and NaN), naming the key and the range."""
    low, high, *open_low = limits
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    inside = (low < value if open_low else low <= value) and value <= high
    if not inside or (isinstance(value, float) and math.isnan(value)):
        kind = "an integer" if isinstance(low, int) else "a number"
        span = f"over {low} up to {high}" if open_low else f"from {low} to {high}"
        raise KerasSaatError(f"config {where}: {shown(value)} is out of range; give {kind} {span}")


SHOWN_REPR = reprlib.Repr()  # bounded at every level: a huge value is never formatted whole
SHOWN_REPR.maxlevel, SHOWN_REPR.maxlist, SHOWN_REPR.maxdict = 2, 4, 4
SHOWN_REPR.maxstring, SHOWN_REPR.maxother, SHOWN_REPR.maxlong = 80, 80, 40


def shown(value):
    """A value as it goes into a message: its repr, at most about 100 characters."""
    text = SHOWN_REPR.repr(value)
    return text if len(text) <= 100 else text[:97] + "..."
