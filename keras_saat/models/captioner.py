"""Captioner: the whole Show, Attend and Tell model as one keras.Model."""

import keras
from keras import ops

from keras_saat.encoders.image_encoder import ImageEncoder
from keras_saat.errors import KerasSaatError
from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS
from keras_saat.layers.attention_registry import get_attention
from keras_saat.layers.feature_familiarity import FeatureFamiliarity
from keras_saat.layers.lstm_decoder import LSTMDecoder
from keras_saat.losses import caption_loss
from keras_saat.models.argument_checks import check_captioner_arguments
from keras_saat.models.familiarity_calibration import FamiliarityCalibration
from keras_saat.models.generation import CaptionGeneration
from keras_saat.models.preset import load_preset, save_preset
from keras_saat.models.record_fitting import RecordFitting
from keras_saat.runtime.precision import dtype_policy
from keras_saat.text.vocabulary import Vocabulary


@keras.saving.register_keras_serializable(package="keras_saat")
class Captioner(CaptionGeneration, FamiliarityCalibration, RecordFitting, keras.Model):
    """Image encoder, Dense(D, relu) squeeze, and the attention LSTM decoder.

    `call` is teacher-forced and takes a dict with `tokens` (B, T + 1) and either `images`
    (B, S, S, 3) pixels in [0, 255] or `features` (B, L, C), the backbone output (a feature
    cache). `compile()` + `fit()` train it with `caption_loss` (an attention type that declares
    `reinforce` adds REINFORCE and moves the baseline).

    `generate` chains three parts, as keras-hub's `CausalLM.generate` does: `preprocessor()`
    (files, bytes or pixels -> pixels), `decode` (the compiled search over `generate_step`,
    which the export also builds on) and `postprocessor` (ids -> words and attention grids).
    Each caption carries the image's `novelty` (`FeatureFamiliarity`: above 1 for a
    picture unlike the training pictures) once `calibrate_familiarity` has run, as
    `keras-saat train` and `fit` on caption records run it.

    Args:
        vocabulary: list of str. Tokens in id order (see `keras_saat.text.Vocabulary`).
        backbone: str. Registry name. Defaults to "shapes_cnn".
        image_size: int or None. Input side; None = the backbone's default. Defaults to None.
        backbone_weights: "imagenet", "shapes" (the Shapes CNN packaged with the library),
            None (random: `fit` warns when the backbone is frozen) or a local file, used at
            construction. Defaults to None.
        trainable_backbone_layers: int. Backbone layers left trainable. Defaults to 0 (frozen).
        feature_dim: int or None. D, annotation size after the Dense(D, relu) squeeze (a
            departure from the paper, which attends over the CNN features themselves);
            None = no squeeze, the backbone's C channels are the annotations. Defaults to 128.
        location_embedding: bool. Add a learned vector per grid location to the L annotations,
            so a frozen backbone's features also say where they are. Defaults to False.
        embedding_dim: int. m. Defaults to 64.
        lstm_units: int. n. Defaults to 256.
        attention_units: int. Attention MLP width. Defaults to 128.
        attention: str. A registered attention type ("soft", "hard"; see
            `keras_saat.layers.attention_registry`). Defaults to "soft".
        gating: bool. Gating scalar beta. Defaults to True.
        dropout: float. Dropout before L_o. Defaults to 0.5.
        doubly_stochastic_lambda: float or None. lambda of Eq. 14. None takes the attention
            type's `doubly_stochastic_lambda`: 1.0 for soft attention, 0 for hard attention
            (the paper regularises deterministic attention only). Defaults to None.
        hard_soft_probability: float. Hard attention's expectation probability. Defaults to 0.5.
        reinforce_weight: float. lambda_r. Defaults to 1.0.
        entropy_weight: float. lambda_e. Defaults to 0.002.
        baseline_decay: float. b <- decay b + (1 - decay) log p(y|s,a) / |y|. Defaults to 0.9.
        reinforce_baseline: str. "moving_average" (the paper's) or "expected_context" (each
            caption's log p(y|a) under the expected context). Defaults to "moving_average".
        max_length: int. Maximum caption length in words (`decode.max_length`). Defaults to 20.
        beam_size: int. Beam width `generate`, `keras-saat caption`, `evaluate` and the
            export use unless told otherwise (`decode.beam_size`); 1 is greedy. Defaults to 3.
        length_penalty: float. Beam search ranks finished captions by
            log p / length ** length_penalty (`decode.length_penalty`). Defaults to 0.
        resize: str. How images of another size reach the input ("crop", "pad" or
            "stretch"): the rule training used (`data.resize`), kept with the model so
            `generate` and the export see images as training did. Defaults to "crop".
        max_pixels: int. Largest width x height an image header may declare for `generate`
            to decode it (`export.max_pixels`, which the SavedModel's graph checks too).
            Defaults to DEFAULT_MAX_PIXELS (25 MP).
        seed: int or None. Dropout and sampling seed. Defaults to None.

    Example:
        ```python
        import keras, keras_saat

        data = keras_saat.data.read_captions("captions.csv")  # CSV/TSV/JSONL, Karpathy, COCO
        model = keras_saat.Captioner.from_records(
            data.train, backbone="efficientnet_lite0", backbone_weights="imagenet"
        )
        model.compile()  # Adam, the paper's loss, XLA where a GPU is visible
        model.fit(data.train, validation_data=data.val, epochs=10,
                  callbacks=[keras.callbacks.ModelCheckpoint("best.keras")])
        keras.saving.load_model("best.keras").generate("photo.jpg")
        ```
    """

    def __init__(
        self,
        vocabulary,
        backbone="shapes_cnn",
        image_size=None,
        backbone_weights=None,
        trainable_backbone_layers=0,
        feature_dim=128,
        embedding_dim=64,
        lstm_units=256,
        attention_units=128,
        attention="soft",
        gating=True,
        location_embedding=False,
        dropout=0.5,
        doubly_stochastic_lambda=None,
        hard_soft_probability=0.5,
        reinforce_weight=1.0,
        entropy_weight=0.002,
        baseline_decay=0.9,
        reinforce_baseline="moving_average",
        max_length=20,
        resize="crop",
        max_pixels=DEFAULT_MAX_PIXELS,
        seed=None,
        beam_size=3,
        length_penalty=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_captioner_arguments(
            reinforce_baseline, beam_size, resize, max_pixels, location_embedding
        )
        self.vocabulary = Vocabulary(vocabulary)
        self.feature_dim = None if feature_dim is None else int(feature_dim)
        if doubly_stochastic_lambda is None:
            doubly_stochastic_lambda = get_attention(attention).doubly_stochastic_lambda
        self.doubly_stochastic_lambda = float(doubly_stochastic_lambda)
        self.reinforce_weight = float(reinforce_weight)
        self.entropy_weight = float(entropy_weight)
        self.baseline_decay = float(baseline_decay)
        self.reinforce_baseline = reinforce_baseline
        self.max_length = int(max_length)
        self.beam_size = int(beam_size)
        self.length_penalty = float(length_penalty)
        self.resize = resize
        self.max_pixels = int(max_pixels)
        self.seed = seed
        self.hard_soft_probability = float(hard_soft_probability)
        settings = {"hard_soft_probability": self.hard_soft_probability}
        attention_options = {k: settings[k] for k in get_attention(attention).options}
        self.encoder = ImageEncoder(
            backbone, image_size, backbone_weights, trainable_backbone_layers, name="encoder"
        )
        # A frozen backbone of random weights gives attention nothing to find: fit() warns.
        self.random_backbone = backbone_weights is None and not trainable_backbone_layers
        self.squeeze = None
        annotation_dim = self.encoder.feature_channels  # D = C without the squeeze
        if self.feature_dim is not None:
            self.squeeze = keras.layers.Dense(self.feature_dim, activation="relu", name="squeeze")
            self.squeeze.build((None, None, annotation_dim))
            annotation_dim = self.feature_dim
        self.locations = None
        if location_embedding:
            grid_h, grid_w = self.encoder.grid_shape
            self.locations = self.add_weight(
                shape=(grid_h * grid_w, annotation_dim),
                initializer="zeros",
                name="location_embedding",
            )  # (L, D)
        self.decoder = LSTMDecoder(
            len(self.vocabulary),
            embedding_dim=embedding_dim,
            lstm_units=lstm_units,
            attention_units=attention_units,
            attention=attention,
            gating=gating,
            dropout=dropout,
            attention_options=attention_options,
            seed=seed,
            name="decoder",
        )
        self.decoder.build(annotation_dim)
        # Statistics of the training images' features, fitted by `calibrate_familiarity`.
        self.familiarity = FeatureFamiliarity(self.encoder.feature_channels, name="familiarity")
        self.baseline = self.add_weight(
            shape=(), initializer="zeros", trainable=False, name="reinforce_baseline"
        )
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self.penalty_tracker = keras.metrics.Mean(name="attention_penalty")
        self.decode_jit_compile = True
        self._decode_fns = {}
        self.built = True

    @property
    def attention(self):
        """The attention type's registered name."""
        return self.decoder.attention_name

    @property
    def reinforce(self):
        """Whether the attention type adds REINFORCE terms and the baseline moves."""
        return self.decoder.attention.reinforce

    @property
    def grid_shape(self):
        """The attention grid (rows, columns): the backbone's feature map, L = rows x columns."""
        return self.encoder.grid_shape

    @property
    def image_size(self):
        """The side of the square input, in pixels."""
        return self.encoder.image_size

    def encode(self, images):
        """Backbone features: (B, S, S, 3) pixels in [0, 255] -> (B, L, C)."""
        return self.encoder(images)

    def annotate(self, features):
        """Annotation vectors a (Sec. 3.1.1): (B, L, C) -> (B, L, D), with each location's
        learned vector added when the model has `location_embedding`."""
        annotations = features if self.squeeze is None else self.squeeze(features)
        if self.locations is None:
            return annotations
        return annotations + ops.cast(self.locations, annotations.dtype)[None]

    def _features(self, inputs):
        if "features" in inputs:
            # Cached features arrive in the cache's dtype (float16): cast on the device.
            return ops.cast(inputs["features"], self.compute_dtype)
        if "images" in inputs:
            return self.encode(inputs["images"])
        if "image_index" in inputs:
            raise KerasSaatError(
                "batches of image indices (from ResidentFeatures) train with "
                "keras_saat.training.Trainer(resident=...), which gathers their features; "
                "for fit(), build the batches from the FeatureCache itself"
            )
        raise KerasSaatError("Captioner inputs need 'images' or 'features' beside 'tokens'")

    @staticmethod
    def caption_tokens(tokens):
        """Token rows (B, T + 1) of a batch: per-image batches' (n, k, T + 1) flattened."""
        if len(tokens.shape) == 3:
            return ops.reshape(tokens, (-1, tokens.shape[2] or ops.shape(tokens)[2]))
        return tokens

    def call(self, inputs, training=False):
        """Teacher-forced outputs (see `LSTMDecoder.call`) for `inputs["tokens"]`.

        `tokens` is (B, T + 1) with one features (or images) row per caption, or (n, k, T + 1)
        with one row per image (`data.batching: per_image`): the annotations of each image,
        their projection W_a a and the initial state are computed once for its k captions.
        """
        tokens = inputs["tokens"]
        annotations = self.annotate(self._features(inputs))  # (B, L, D) or (n, L, D)
        repeats = (tokens.shape[1] or ops.shape(tokens)[1]) if len(tokens.shape) == 3 else None
        tokens = self.caption_tokens(tokens)
        outputs = self.decoder(annotations, tokens[:, :-1], training=training, repeats=repeats)
        if training and self.reinforce and self.reinforce_baseline == "expected_context":
            # The same captions under the expected context: a baseline that depends on y and a
            # but not on the sampled locations s, so REINFORCE stays unbiased.
            expected = self.decoder(annotations, tokens[:, :-1], training=False, repeats=repeats)
            outputs["baseline_logits"] = ops.stop_gradient(expected["logits"])
        return outputs

    def loss_terms(self, outputs, tokens):
        """`keras_saat.losses.caption_loss` with this model's settings."""
        return caption_loss(
            outputs,
            self.caption_tokens(tokens),
            doubly_stochastic_lambda=self.doubly_stochastic_lambda,
            baseline=self.baseline,
            reinforce_weight=self.reinforce_weight,
            entropy_weight=self.entropy_weight,
            attention=self.decoder.attention,
        )

    def update_baseline(self, log_p_per_word, policy_rows=None):
        """b <- decay b + (1 - decay) mean(log p(y|s,a) / |y|) over sampled captions.

        The per-word moving-average baseline of Sec. 4.1; rows decoded with the expected
        context do not move it.
        """
        values = ops.cast(log_p_per_word, "float32")
        weights = ops.ones_like(values) if policy_rows is None else ops.cast(policy_rows, "float32")
        self.move_baseline(ops.sum(values * weights), ops.sum(weights))

    def move_baseline(self, log_p_sum, count):
        """The baseline update from a sum of sampled captions' per-word log p(y|s,a) and their count."""
        mean = log_p_sum / ops.maximum(count, 1.0)
        moved = self.baseline_decay * self.baseline + (1.0 - self.baseline_decay) * mean
        self.baseline.assign(ops.stop_gradient(ops.where(count > 0, moved, self.baseline)))

    @property
    def precision(self):
        """The compute precision: "float32", "bfloat16" or "float16" (mixed policies)."""
        return self.decoder.compute_dtype

    def with_settings(self, **changes):
        """A copy of this model with some constructor arguments changed (`beam_size`,
        `resize`, ...) and the same weights."""
        clone = type(self).from_config({**self.get_config(), **changes})
        clone.set_weights(self.get_weights())
        clone.decode_jit_compile = self.decode_jit_compile
        return clone

    def with_precision(self, precision):
        """A copy of this model that computes in `precision` ("float32", "bfloat16",
        "float16", or a `train.mixed_precision` setting), with the same float32 weights."""
        with dtype_policy(precision):
            return self.with_settings(dtype=None)  # the policy in force while building decides

    def save_to_preset(self, preset_dir, metadata=None):
        """Writes this model as a preset folder (keras-hub's layout, `keras_saat.models.preset`):
        config.json, model.weights.h5, metadata.json and assets/vocabulary.txt.

        Args:
            preset_dir: str or Path. Created if missing.
            metadata: dict or None. Extra metadata.json entries. Defaults to None.
        """
        return save_preset(self, preset_dir, metadata)

    @classmethod
    def from_preset(cls, preset):
        """Loads a Captioner from a local preset folder (`save_to_preset`'s layout)."""
        return load_preset(preset, cls)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A Captioner from `get_config`'s dict. `backbone_weights` is ignored: a saved
        model's weights are in its file, and a config from elsewhere must not make loading
        read a path of its choosing or download anything."""
        model = super().from_config({**config, "backbone_weights": None})
        model.random_backbone = False  # its weights are loaded next, or copied in
        return model

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary=list(self.vocabulary.words),
            backbone=self.encoder.backbone_name,
            image_size=self.encoder.image_size,
            backbone_weights=None,
            trainable_backbone_layers=self.encoder.trainable_layers,
            feature_dim=self.feature_dim,
            embedding_dim=self.decoder.embedding_dim,
            lstm_units=self.decoder.lstm_units,
            attention_units=self.decoder.attention_units,
            attention=self.attention,
            gating=self.decoder.gating,
            location_embedding=self.locations is not None,
            dropout=self.decoder.dropout,
            doubly_stochastic_lambda=self.doubly_stochastic_lambda,
            hard_soft_probability=self.hard_soft_probability,
            reinforce_weight=self.reinforce_weight,
            entropy_weight=self.entropy_weight,
            baseline_decay=self.baseline_decay,
            reinforce_baseline=self.reinforce_baseline,
            max_length=self.max_length,
            beam_size=self.beam_size,
            length_penalty=self.length_penalty,
            resize=self.resize,
            max_pixels=self.max_pixels,
            seed=self.seed,
        )
        return config
