"""A workdir with checkpoints resumes only the experiment that wrote them."""

from keras_saat.config import load_config, to_dict
from keras_saat.errors import KerasSaatError
from keras_saat.workdir import CHECKPOINT_DIR, CONFIG_FILE

# What a resumed run may change: how it computes (the same batches and weights either
# way) and how long it runs, not what it trains.
MAY_CHANGE = {
    "train": {
        "jit_compile",  # how the step is compiled
        "unroll",  # the same values, unrolled or in a loop
        "fused_scores",  # the same values, fused or not
        "epochs",
        "patience",
        "log_every",
        "summary_images",
        "validate_every",
        "checkpoint_every",
        "max_checkpoints",
    },
    "data": {"resident_features", "resident_budget"},  # where the features are held
}


def check_resume_config(config, workdir):
    """Raises KerasSaatError when `workdir` holds checkpoints of another config (one
    that differs beyond `MAY_CHANGE`, decoding and export)."""
    saved = workdir / CONFIG_FILE
    if not (workdir / CHECKPOINT_DIR).exists() or not saved.exists():
        return
    previous = load_config(saved)

    def compared(values):
        # Decoding and export settings do not touch the trained weights.
        values = {**values, "decode": None, "export": None}
        for section, keys in MAY_CHANGE.items():
            values[section] = {k: v for k, v in values[section].items() if k not in keys}
        return values

    mine, theirs = compared(to_dict(config)), compared(to_dict(previous))
    if mine != theirs:
        changed = [
            f"{section}.{key}"
            for section in theirs
            if isinstance(theirs[section], dict)
            for key in theirs[section]
            if theirs[section][key] != mine[section][key]
        ]
        raise KerasSaatError(
            f"{workdir} holds checkpoints of another config (changed: {', '.join(changed) or 'name'}); "
            "use a new --workdir, or delete its checkpoints folder to start again"
        )
