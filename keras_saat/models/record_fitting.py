"""fit(), evaluate() and compile() that also take caption records, preprocessed as the
model captions (its image size, resize rule and vocabulary)."""

import warnings
from pathlib import Path

import keras
import tensorflow as tf
from keras import ops

from keras_saat.errors import KerasSaatError
from keras_saat.layers.feature_familiarity import FOLDS

DEFAULT_BATCH_SIZE = 32  # Keras's own default for fit()
MAX_UNKNOWN_SHARE = 0.5  # of training words outside the vocabulary: built for other captions
LISTED = 3  # offenders named in an error


def _features_only(data):
    """Whether a dataset's batches carry backbone features (the backbone is not run)."""
    spec = getattr(data, "element_spec", None)
    spec = spec[0] if isinstance(spec, tuple) else spec
    return isinstance(spec, dict) and "features" in spec


def is_records(value):
    """Whether `value` is a non-empty list or tuple of records (`.path` and `.captions`)."""
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(hasattr(r, "path") and hasattr(r, "captions") for r in value)
    )


def check_inputs(method, x, y=None, empty="x"):
    """Raises our one-sentence error for inputs `method` ("fit", "evaluate") cannot take."""
    if isinstance(x, (list, tuple)) and not x:
        raise KerasSaatError(
            f"Captioner.{method}: {empty} holds no records (a split of a small caption file "
            "without a split column can come out empty: give the file a split column)"
        )
    if hasattr(x, "records") and hasattr(x, "split"):  # a whole CaptionDataset
        raise KerasSaatError(
            f"Captioner.{method} takes one split's records: pass data.train "
            "(and validation_data=data.val), not the whole dataset"
        )
    if is_records(x):
        if y is not None:
            raise KerasSaatError(
                f"Captioner.{method}(records) takes no y: the captions are in the records"
            )
        return
    if isinstance(x, dict) or hasattr(x, "element_spec") or hasattr(x, "__next__"):
        if y is not None:
            raise KerasSaatError(
                f'Captioner.{method} takes no y: the tokens go in x["tokens"] beside the images'
            )
        return
    shape = getattr(x, "shape", None)
    what = f"an array of shape {tuple(shape)}" if shape is not None else type(x).__name__
    raise KerasSaatError(
        f"Captioner.{method} takes caption records (keras_saat.data.read_captions(path).train) "
        f'or a tf.data.Dataset of {{"images" or "features", "tokens"}} batches, not {what}'
        + (" and y" if y is not None else "")
        + "; to train on images and captions you hold in memory, write them to files and a "
        "CSV (image,caption) and read it with keras_saat.data.read_captions"
    )


def check_records(records, vocabulary, what):
    """Raises when images are missing or the captions' words are mostly unknown."""
    streamed = [r for r in records if r.path is None]
    if streamed:
        raise KerasSaatError(
            f"{len(streamed)} {what} records have no image file (a streamed TFDS dataset); "
            "train on them with `keras-saat train`, which reads the stream"
        )
    missing = [str(r.path) for r in records if not Path(r.path).is_file()]
    if missing:
        raise KerasSaatError(
            f"{len(missing)} of {len(records)} {what} images are missing "
            f"(first: {', '.join(missing[:LISTED])}); fix their paths or leave those records "
            "out (read_captions skips missing files and counts them in dataset.skips)"
        )
    words = [w for r in records for tokens in r.references for w in tokens]
    unknown = [w for w in words if w not in vocabulary]
    if words and len(unknown) / len(words) > MAX_UNKNOWN_SHARE:
        first = list(dict.fromkeys(unknown))[:LISTED]
        raise KerasSaatError(
            f"{len(unknown) / len(words):.0%} of the {what} captions' words are not in this "
            f"model's vocabulary (first: {', '.join(first)}): it was built for other captions; "
            "build a model for these with Captioner.from_records(records, ...)"
        )


class RecordFitting:
    """`Captioner`'s Keras training methods: compile, fit and evaluate (which also take
    records), the train and test steps and their metrics (a mixin before keras.Model)."""

    @classmethod
    def from_records(cls, records, max_vocabulary=None, min_count=1, **kwargs):
        """A new Captioner whose vocabulary is built from the records' captions.

        Args:
            records: list of ImageRecord. The training records (`data.train`).
            max_vocabulary: int or None. Vocabulary size, the 4 special tokens included;
                None keeps every word. Defaults to None.
            min_count: int. Words seen fewer times become `<unk>`. Defaults to 1.
            **kwargs: the other Captioner arguments (`backbone`, `backbone_weights`, ...).
        """
        from keras_saat.text.vocabulary import Vocabulary

        if not is_records(records):
            raise KerasSaatError(
                "Captioner.from_records takes a list of records: "
                "keras_saat.data.read_captions(path).train"
            )
        vocabulary = Vocabulary.from_records(records, max_vocabulary, min_count)
        return cls(list(vocabulary.words), **kwargs)

    def compile(
        self, optimizer="adam", loss=None, loss_weights=None, metrics=None,
        weighted_metrics=None, run_eagerly=False, steps_per_execution=1, jit_compile="auto",
        auto_scale_loss=True,
    ):  # fmt: skip
        """Keras's `compile` with the paper's loss (`caption_loss`): no `loss` or `metrics`.

        Args:
            optimizer: str or keras.optimizers.Optimizer. Defaults to "adam" (the paper's
                optimiser on Flickr30k and COCO).
            jit_compile: bool or "auto". "auto" compiles with XLA where a GPU or TPU is
                visible. Defaults to "auto".
        """
        from keras_saat.runtime.xla import resolve_jit_compile

        if loss is not None or metrics is not None or weighted_metrics is not None:
            raise KerasSaatError(
                "Captioner.compile takes no loss or metrics: it trains with the paper's loss "
                "(keras_saat.losses.caption_loss) and reports loss, nll and the attention "
                "penalty; add keras_saat.callbacks.CaptionMetrics(data.val) for BLEU and CIDEr"
            )
        if not run_eagerly:  # Keras turns XLA off itself when run eagerly
            jit_compile = resolve_jit_compile(jit_compile)
        super().compile(
            optimizer=optimizer, loss_weights=loss_weights, run_eagerly=run_eagerly,
            steps_per_execution=steps_per_execution, jit_compile=jit_compile,
            auto_scale_loss=auto_scale_loss,
        )  # fmt: skip

    def compile_from_config(self, config):
        """Compiles a loaded model as it was saved (its optimizer, whose state loads next);
        XLA is decided anew for the machine it loads on."""
        config = keras.saving.deserialize_keras_object(config)
        kept = ("optimizer", "run_eagerly", "steps_per_execution")
        self.compile(**{k: config[k] for k in kept if k in config})
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def caption_batches(self, records, batch_size=DEFAULT_BATCH_SIZE, training=True):
        """Batches {"images", "tokens"} of every caption of `records`, as this model sees
        them. Training batches shuffle and repeat; the others come once, in order.

        Returns:
            (tf.data.Dataset, batches a pass).
        """
        from keras_saat.data.pipeline.batch_plan import BatchPlan
        from keras_saat.data.pipeline.image_file_source import ImageFiles
        from keras_saat.data.pipeline.input_pipeline import caption_batches, token_table

        records = list(records)
        check_records(records, self.vocabulary, "training" if training else "validation")
        batch_size = int(batch_size or DEFAULT_BATCH_SIZE)
        captions = sum(len(r.captions) for r in records)
        if training:
            if captions < batch_size:
                raise KerasSaatError(
                    f"{captions} training captions make no full batch of {batch_size}: "
                    "lower batch_size"
                )
            plan = BatchPlan(batch_size, seed=self.seed, repeat=True)
            steps = captions // batch_size
        else:
            plan = BatchPlan(batch_size, shuffle_buffer=0, drop_remainder=False)
            steps = -(-captions // batch_size)
        tokens = token_table(records, self.vocabulary, self.max_length)
        source = ImageFiles(self.image_size, self.resize)
        return caption_batches(source, "train" if training else "val", records, tokens, plan), steps

    def fit(
        self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
        validation_split=0.0, validation_data=None, shuffle=None, class_weight=None,
        sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
        validation_batch_size=None, validation_freq=1,
    ):  # fmt: skip
        """Keras's `fit`, which also takes caption records for `x` and `validation_data`;
        fitted on records of more than five images, the model then runs
        `calibrate_familiarity` on them.

        Args:
            x: records (`read_captions(path).train`) or what `keras.Model.fit` takes: a
                tf.data.Dataset of {"images" or "features", "tokens"} batches.
            batch_size: int or None. Captions a batch when `x` is records (and of the
                validation records, unless `validation_batch_size`). Defaults to None (32).
            validation_data: records (`data.val`) or a dataset; its loss is `val_loss`.
            shuffle: bool or None. None: records are shuffled in the pipeline, anew each
                epoch, a dataset keeps its order and arrays are shuffled. Defaults to None.
            steps_per_epoch: int or None. None with records: every caption once an epoch.
                Defaults to None.
        """
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        check_inputs("fit", x, y)
        if validation_split:
            raise KerasSaatError(
                "Captioner.fit takes no validation_split: give validation_data=data.val"
            )
        if validation_data is not None:
            check_inputs("fit (validation_data)", validation_data, empty="validation_data")
        if is_records(x):
            given["x"], steps = self.caption_batches(x, batch_size, training=True)
            if steps_per_epoch is None:
                given["steps_per_epoch"] = steps
            given["shuffle"], given["batch_size"] = False, None
        elif shuffle is None:
            given["shuffle"] = not hasattr(x, "element_spec")  # a dataset keeps its order
        if is_records(validation_data):
            size = validation_batch_size or batch_size
            given["validation_data"], steps = self.caption_batches(validation_data, size, False)
            given["validation_batch_size"] = None
            if validation_steps is None:
                given["validation_steps"] = steps
        if getattr(self, "random_backbone", False) and not _features_only(given["x"]):
            warnings.warn(
                "the backbone has random weights and is frozen, so attention has no objects "
                'to find; build the model with backbone_weights="imagenet" (or "shapes", a '
                "weights file) or trainable_backbone_layers > 0",
                UserWarning,
                stacklevel=2,
            )
        history = super().fit(**given)
        # The training images' features, for each caption's novelty; a handful of images
        # cannot place a threshold, and the model then says it is not calibrated.
        if is_records(x) and len({str(r.path) for r in x}) > FOLDS:
            held = validation_data if is_records(validation_data) else None
            self.calibrate_familiarity(x, validation=held)
        return history

    def evaluate(
        self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
        callbacks=None, return_dict=False, **kwargs,
    ):  # fmt: skip
        """Keras's `evaluate` (the loss terms), which also takes caption records for `x`.

        For BLEU, METEOR and CIDEr, caption the images: `keras-saat evaluate`, or
        `keras_saat.callbacks.CaptionMetrics(records).evaluate(model)`.
        """
        check_inputs("evaluate", x, y)
        if is_records(x):
            x, count = self.caption_batches(x, batch_size, training=False)
            steps, batch_size = count if steps is None else steps, None
        return super().evaluate(
            x, y, batch_size=batch_size, verbose=verbose, sample_weight=sample_weight,
            steps=steps, callbacks=callbacks, return_dict=return_dict, **kwargs,
        )  # fmt: skip

    @property
    def metrics(self):
        penalty = [self.penalty_tracker] if self.doubly_stochastic_lambda else []
        return [self.loss_tracker, self.nll_tracker, *penalty]

    def _update_metrics(self, terms):
        self.loss_tracker.update_state(terms["loss"])
        self.nll_tracker.update_state(terms["nll"])
        if self.doubly_stochastic_lambda:
            self.penalty_tracker.update_state(terms["penalty"])
        logs = {m.name: m.result() for m in self.metrics}
        if self.reinforce:
            logs["baseline"] = ops.convert_to_tensor(self.baseline)
        return logs

    def weight_gradients(self, tape, loss):
        """d loss / d trainable weights, zeros for weights the loss does not reach (an
        attention type may leave some of the base class's weights unused)."""
        weights = self.trainable_weights
        gradients = tape.gradient(loss, weights)
        return [
            tf.zeros(w.shape, w.dtype) if g is None else g
            for g, w in zip(gradients, weights, strict=True)
        ]

    def train_step(self, data):
        inputs = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            outputs = self(inputs, training=True)
            terms = self.loss_terms(outputs, inputs["tokens"])
            scaled = self.optimizer.scale_loss(terms["loss"])
        gradients = self.weight_gradients(tape, scaled)
        self.optimizer.apply(gradients, self.trainable_weights)
        if self.reinforce:
            self.update_baseline(terms["log_p_per_word"], terms["policy_rows"])
        return self._update_metrics(terms)

    def test_step(self, data):
        inputs = data[0] if isinstance(data, tuple) else data
        terms = self.loss_terms(self(inputs, training=False), inputs["tokens"])
        return self._update_metrics(terms)

    def predict(self, *args, **kwargs):
        """Not a Captioner's: captions come from `generate`."""
        shape = getattr(args[0], "shape", None) if args else None
        what = f" (got an array of shape {tuple(shape)})" if shape is not None else ""
        raise KerasSaatError(
            f"Captioner.predict is not defined{what}: caption images with "
            "model.generate(images) (paths, bytes or pixels), or call model(inputs) for the "
            "teacher-forced outputs"
        )
