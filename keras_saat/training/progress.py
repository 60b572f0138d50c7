"""The training loop's progress display: a bar on terminals, log lines elsewhere."""

import sys

import keras


class Progress:
    """A progress bar on terminals; otherwise a log line at each reporting step."""

    def __init__(self, steps, log):
        self.steps, self.log = steps, log
        self.bar = None
        if sys.stdout.isatty():
            self.bar = keras.utils.Progbar(
                steps, stateful_metrics=["loss", "nll", "captions/s", "lr"], unit_name="step"
            )

    def update(self, epoch, step, values, report):
        if self.bar is not None:
            self.bar.update(min(step, self.steps), list(values.items()))
        elif report:
            shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items())
            self.log(f"  epoch {epoch} step {step}/{self.steps}: {shown}")
