"""Experiment configuration: frozen dataclasses, YAML files and key=value overrides.

An `ExperimentConfig` has five sections (`model`, `data`, `train`, `decode`, `export`).
YAML files override the defaults and `--set section.key=value` overrides the file; an
unknown key is an error naming the nearest valid one. Choices are in `config_choices`,
ranges in `config_ranges`, file reading in `config_files`.
"""

import dataclasses
import typing
from pathlib import Path

import yaml

from keras_saat.config_choices import check_value, coerce
from keras_saat.config_files import parse_override, read_config_file, recipe_names, recipe_path
from keras_saat.errors import KerasSaatError, did_you_mean
from keras_saat.images.image_formats import DEFAULT_MAX_PIXELS
from keras_saat.io_utils import write_text_atomic


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    # Backbone registry name (see `keras_saat.encoders.available_backbones()`); a backbone
    # registered with `register_backbone` is accepted too.
    backbone: str = "shapes_cnn"
    # Square input side in pixels; 0 means the backbone's default size.
    image_size: int = 0
    # "imagenet", null (random init), a local weights file, or "shapes": pre-train the
    # Shapes CNN (shapes_cnn, shapes_cnn_small or their _norm variants) on the training
    # split's scene attributes, then freeze it.
    backbone_weights: str | None = None
    # Number of the backbone's last weighted layers left trainable (0 = frozen, as in the paper).
    trainable_backbone_layers: int = 0
    # D: size of an annotation vector after the Dense(D, relu) squeeze; null = no squeeze,
    # the backbone's C channels are the annotations (the paper's a_i, D = C).
    feature_dim: int | None = 128
    # m: word embedding size (also the deep output layer's width, Eq. 7).
    embedding_dim: int = 64
    # n: LSTM hidden and cell size.
    lstm_units: int = 256
    # Width of the attention MLP f_att (Eq. 4).
    attention_units: int = 128
    # "soft" (deterministic, Sec. 4.2), "hard" (stochastic, Sec. 4.1), or another type
    # registered with `keras_saat.layers.register_attention`.
    attention: str = "soft"
    # Gating scalar beta = sigmoid(f_beta(h_{t-1})) on the context vector (Sec. 4.2.1).
    gating: bool = True
    # A learned vector added to each grid location's annotation (not in the paper): tells
    # the decoder where a frozen backbone's translation-equivariant features are.
    location_embedding: bool = False
    # Dropout rate before the output layer L_o.
    dropout: float = 0.5
    # lambda of the doubly stochastic regulariser sum_i (1 - sum_t alpha_ti)^2 (Eq. 14).
    # null: the attention type's own (soft 1.0; hard 0, as the paper, Sec. 4.2.1).
    doubly_stochastic_lambda: float | None = None
    # Hard attention: probability of using the expected context instead of a sample (Sec. 4.1).
    hard_soft_probability: float = 0.5
    # Hard attention: lambda_r, weight of the REINFORCE term (Eq. 12).
    reinforce_weight: float = 1.0
    # Hard attention: lambda_e, weight of the attention entropy bonus (Eq. 12).
    entropy_weight: float = 0.002
    # Hard attention: decay of the moving-average baseline b <- decay*b + (1-decay)*log p(y|s,a).
    baseline_decay: float = 0.9
    # Hard attention: the REINFORCE baseline. "moving_average" (the paper's, per word, times the
    # caption's length) or "expected_context": log p(y | a) of the same caption decoded with
    # the expected context (one more decoder pass, no gradient; much lower variance).
    reinforce_baseline: str = "moving_average"
    # Seed for dropout, the hard-attention sampler and weight initialisation.
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class DataConfig:
    # "shapes" (generated when missing), "karpathy" (dataset_*.json), "flickr8k"
    # (Flickr8k.token.txt + split lists), "coco" (captions_*.json), "tfds" (coco_captions),
    # "captions" (your own CSV, TSV or JSON lines: image, caption[, split]), or another
    # reader registered with `register_reader`.
    dataset: str = "shapes"
    # The dataset file (Karpathy JSON, Flickr8k.token.txt, COCO captions_train2014.json,
    # captions CSV/TSV/JSONL) or TFDS name; empty = <workdir>/data/dataset_shapes.json.
    path: str = ""
    # COCO only: captions_val2014.json (its images give val, test and the rest train).
    val_path: str = ""
    # Image folder; empty = the reader's default (Karpathy: the JSON's folder; Flickr8k:
    # Flicker8k_Dataset beside the token file; COCO: the annotation folder's parent).
    images_dir: str = ""
    # TFDS only: the TFDS data folder; empty = TFDS's default.
    tfds_data_dir: str = ""
    # Stop at the first bad image, line or caption instead of skipping and counting it.
    strict: bool = False
    # How images reach the backbone's square input: "crop" (shorter side, centre crop),
    # "pad" or "stretch".
    resize: str = "crop"
    # Feature cache dtype: "float16" (half the disk), "float32", or "int8" (a quarter:
    # each image's channels scaled to -127..127, dequantised in the input pipeline).
    cache_dtype: str = "float16"
    # Feature cache compression of each image's record: "none" or "zlib".
    cache_compression: str = "none"
    # Images per feature cache shard (a killed extraction redoes at most one shard).
    cache_shard_size: int = 1000
    # Another workdir's feature cache to read, never write ("" = extract into
    # <workdir>/features): a second decoder on the same frozen backbone and images, checked
    # to be what this run would extract, every split finished and no image changed since.
    feature_cache: str = ""
    # Captions shuffled together: an epoch reads the shards in a seeded order, in windows
    # of whole shards holding at least this many, and permutes each window; 0 keeps order.
    shuffle_buffer: int = 5000
    # Validation images captioned after each validated epoch: a subset of the val split
    # drawn once with train.seed (null = the whole split); the test split is always scored whole.
    val_images: int | None = 5000
    # Batch captions of similar length together (several static shapes, fewer pads).
    bucket_by_length: bool = False
    # How training batches are formed: "per_caption", every (image, caption) pair an
    # example, shuffled across images; "per_image", images with all their captions, each
    # image's features sent to the device once (keeps a GPU fed); "auto", per_image where
    # the features stream from the cache and captions are not bucketed, else per_caption.
    batching: str = "auto"
    # What becomes of a batch a shuffle window (or length bucket) cannot fill. "pad":
    # padded with rows that weigh nothing in the loss, so every caption trains once an
    # epoch at one batch shape (one XLA compile). "drop": left out, a different few each
    # epoch. A training backbone reading image files drops the last partial batch.
    partial_batches: str = "pad"
    # Hold the train split's cached features in the device's memory, so each step
    # receives image indices and gathers rows on the device (the same batches as
    # streaming). true, false, or "auto": resident when the split fits resident_budget.
    resident_features: bool | str = "auto"
    # The share of the device's free memory (a GPU's, or the host's available memory on
    # a CPU, measured when training starts) the resident features may take, in (0, 1].
    resident_budget: float = 0.5
    # Vocabulary size including the 4 special tokens (the top words by count are kept).
    vocab_size: int = 10000
    # Words seen fewer times than this in the training captions become <unk>.
    min_count: int = 1
    # Captions longer than this many words are truncated. Training batches are padded to
    # the longest training caption (at most this), so a larger value costs nothing.
    max_length: int = 20
    # Shapes world: number of generated train / val / test images and the generator seed.
    shapes_train: int = 2000
    shapes_val: int = 200
    shapes_test: int = 200
    shapes_seed: int = 0
    # Shapes world: share of the training scenes drawn on a random page under uneven,
    # varied light, so the decoder learns pictures unlike the world; val and test keep it.
    shapes_varied: float = 0.0
    # Shapes world: the varied views added beside the world's scenes (a second image of the
    # same scene, same captions) rather than drawn in their place: more training images.
    shapes_varied_copies: bool = False


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    # Passes over every (image, caption) pair of the training split.
    epochs: int = 10
    # Captions per step, over all replicas (the global batch).
    batch_size: int = 64
    # "adam" or "rmsprop" (the paper used RMSProp on Flickr8k, Adam elsewhere).
    optimizer: str = "adam"
    # Peak learning rate of the optimiser.
    learning_rate: float = 1e-3
    # "constant", "cosine" (decays to learning_rate * lr_final_fraction over the run) or
    # "exponential" (multiplied by lr_decay_rate each epoch).
    lr_schedule: str = "constant"
    # Steps of linear warm-up from 0 to learning_rate (0 = none).
    warmup_steps: int = 0
    # Cosine schedule: the final learning rate as a fraction of learning_rate.
    lr_final_fraction: float = 0.1
    # Exponential schedule: factor applied to the learning rate each epoch.
    lr_decay_rate: float = 0.9
    # Clip the gradients to this global norm (0 = off).
    clipnorm: float = 5.0
    # Compile the train step with XLA: true, false, or "auto" (XLA when a GPU or TPU is
    # visible). Falls back, with the reason logged, when XLA cannot compile.
    jit_compile: bool | str = "auto"
    # Teacher forcing unrolled (true: the faster step) or one tf.while_loop (false: a
    # compile that does not grow with T, for runs whose compile outweighs their steps).
    unroll: bool = True
    # Eq. 4's scores as one fused block with a custom gradient: the same values, no
    # (B, L, A) tensor kept per step, so XLA compiles sooner. "auto" (as false): autodiff.
    fused_scores: bool | str = "auto"
    # XLA's persistent compilation cache in <workdir>/xla_cache: a resumed or repeated
    # run loads the compiled train and decode steps instead of compiling them again.
    compilation_cache: bool = True
    # "default" (one device), "mirrored" (all local GPUs, or CPU devices) or "multi_worker"
    # (MultiWorkerMirroredStrategy; each worker reads TF_CONFIG).
    distribute: str = "default"
    # Mixed precision: none, bfloat16, float16 (with loss scaling, for GPUs before
    # Ampere) or auto (keras_saat/runtime/precision.py).
    mixed_precision: str = "none"
    # Stop after this many validations (epochs, with train.validate_every 1) without a better
    # validation BLEU-4 (0 = never).
    patience: int = 0
    # Save a checkpoint every this many steps as well as after each epoch (0 = epochs only).
    checkpoint_every: int = 500
    # Checkpoints kept in <workdir>/checkpoints.
    max_checkpoints: int = 3
    # Stop the run after this many consecutive steps with a non-finite loss or gradient.
    max_nonfinite_steps: int = 20
    # Deterministic TensorFlow ops (bitwise-repeatable runs and resumes; slower on GPU).
    deterministic: bool = False
    # Log a progress line (and TensorBoard scalars) every this many steps.
    log_every: int = 50
    # Validate (caption data.val_images images and score them) every this many epochs;
    # the last epoch is always validated. Early stopping's patience counts validations.
    validate_every: int = 1
    # Validation images whose attention maps go to TensorBoard after each epoch.
    summary_images: int = 2
    # Epochs of Shapes CNN pre-training when model.backbone_weights is "shapes".
    backbone_pretrain_epochs: int = 4
    # Scenes rendered for that pre-training beyond the training split (its own seed).
    backbone_pretrain_scenes: int = 0
    # Vary photometry in that pre-training (pages, light, colour augmentation), so the
    # frozen CNN names what it names on a brighter page or under another light.
    backbone_pretrain_augment: bool = True
    # Start from the Shapes CNN packaged with the library when it is the one this run
    # would pre-train (same variant, settings, seed, size and world); false pre-trains.
    backbone_packaged: bool = True
    # Seed for shuffling.
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    # Maximum number of generated words (the <end> token not counted).
    max_length: int = 20
    # Images per decoding batch of `caption`, `generate`, validation and `evaluate`; a run's
    # short last batch is padded to it (models/batch_decoder.py: one compiled shape a run).
    batch_size: int = 64
    # Beam width for `evaluate`, `caption` and `export` (1 = greedy). Validation during
    # training always decodes greedily.
    beam_size: int = 3
    # Beam search ranks finished captions by log p / length ** length_penalty (0 = raw log p).
    length_penalty: float = 0.0
    # Score METEOR 1.5 in `evaluate` and after `train` when Java is on the PATH; false
    # leaves it out (its paraphrase tables dominate the scoring time).
    meteor: bool = True


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    # The export format: "savedmodel" (TF Serving), "preset" (a preset folder for
    # `Captioner.from_preset` and `--preset`), "litert" (one .tflite file for phones and
    # edge devices, builtin ops only), or another registered with
    # `keras_saat.export_formats.register_export_format`.
    format: str = "savedmodel"
    # The model name TF Serving serves it under (models.config, warmup requests, the client).
    model_name: str = "keras_saat"
    # Largest width x height an image header may declare; bigger images come back invalid
    # before any pixel is decoded (decompression bombs).
    max_pixels: int = DEFAULT_MAX_PIXELS
    # How images of another size reach the model's input: "crop", "pad" or "stretch"
    # ("" = data.resize, what training saw).
    resize: str = ""
    # Write assets.extra/tf_serving_warmup_requests, which TF Serving replays before serving.
    warmup: bool = True
    # Images per backbone call inside the exported graph; 0 = the whole batch; null = 0
    # with oneDNN, else 2 (export with the serving machine's kernels).
    encoder_chunk: int | None = None
    # Fold the backbone's batch norms into its convolutions in the exported graph, checked
    # against the unfolded backbone at export (fewer ops).
    fold_batch_norms: bool = True
    # The serving graph's compute precision: float32, bfloat16 (fast only where the
    # serving machine computes bfloat16 natively), or auto (bfloat16 where the exporting
    # machine does). Outputs stay float32.
    precision: str = "float32"
    # LiteRT only: "none", "float16" (float16 weights, half the file) or "int8" (dynamic-range
    # int8 weights, a quarter of the file; activations stay float).
    quantize: str = "none"


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    # A name for logs and the metadata of exported models.
    name: str = "experiment"
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)


_SECTIONS = {f.name: f.type for f in dataclasses.fields(ExperimentConfig) if f.name != "name"}


def _section(name, cls, values, base):
    if not isinstance(values, dict):
        raise KerasSaatError(f"config section '{name}' must be a mapping of key: value")
    hints = typing.get_type_hints(cls)
    updates = {}
    for key, value in values.items():
        if key not in hints:
            raise KerasSaatError(
                f"unknown config key '{name}.{str(key)[:100]}'{did_you_mean(str(key)[:100], hints)}; "
                f"valid keys of '{name}': {', '.join(hints)}"
            )
        updates[key] = check_value(name, key, value, hints[key])
    return dataclasses.replace(base, **updates)


def from_dict(values, base=None):
    """Builds an ExperimentConfig from a nested dict, overriding `base` (defaults if None)."""
    config = base or ExperimentConfig()
    if values is None:
        return config
    if not isinstance(values, dict):
        raise KerasSaatError(
            "a config must be a mapping with sections model, data, train, decode, export"
        )
    updates = {}
    for key, value in values.items():
        if key == "name":
            updates["name"] = coerce("name", value, str)
        elif key in _SECTIONS:
            updates[key] = _section(key, _SECTIONS[key], value, getattr(config, key))
        else:
            valid = ["name", *_SECTIONS]
            raise KerasSaatError(
                f"unknown config section '{str(key)[:100]}'{did_you_mean(str(key)[:100], valid)}; "
                f"valid top-level keys: {', '.join(valid)}"
            )
    return dataclasses.replace(config, **updates)


def to_dict(config):
    """The config as a plain nested dict (YAML-serialisable)."""
    return dataclasses.asdict(config)


def load_config(path=None, overrides=(), base=None):
    """Loads a YAML config (optional) and applies `section.key=value` overrides.

    `path` is a YAML file, or the name of a packaged recipe ("shapes_soft", "shapes_hard").
    """
    config = base or ExperimentConfig()
    if path is not None:
        path = Path(path)
        if not path.is_file() and path.name == str(path) and path.suffix == "":
            path = recipe_path(str(path))
        if not path.is_file():
            raise KerasSaatError(
                f"config file not found: {path} (or give a recipe: {', '.join(recipe_names())})"
            )
        values = read_config_file(path)
        try:
            config = from_dict(values, config)
        except KerasSaatError as err:
            raise KerasSaatError(f"{path}: {err}") from None
    for text in overrides:
        config = from_dict(parse_override(text), config)
    return config


def save_config(config, path):
    """Writes the resolved config as YAML, atomically (a resume reads it back)."""
    write_text_atomic(path, yaml.safe_dump(to_dict(config), sort_keys=False))
