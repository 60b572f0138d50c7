import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat import Captioner, load_captioner
from keras_saat.data import read_karpathy
from keras_saat.errors import KerasSaatError
from keras_saat.images.decoding import load_images
from keras_saat.text import PAD_ID, START_ID, Vocabulary
from tests import reference as ref
from tests.helpers import WORDS, small_model


def batch(vocab, n=4, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 64, 128)).astype("float32")
    captions = [list(rng.choice(WORDS, size=rng.integers(2, 6))) for _ in range(n)]
    return {"features": features, "tokens": vocab.encode_batch(captions, 6)}


def reference_loss(model, data):
    """Eq. 7 logits and the paper's loss in NumPy, from the model's weights (no dropout)."""
    annotations = np.maximum(
        data["features"] @ np.asarray(model.squeeze.kernel) + np.asarray(model.squeeze.bias), 0.0
    )
    tokens = data["tokens"]
    out = ref.decoder(
        annotations.astype(np.float64), tokens[:, :-1], ref.decoder_weights(model.decoder)
    )
    mask = (tokens[:, 1:] != 0).astype(np.float64)
    log_p = np.take_along_axis(ref.log_softmax(out["logits"]), tokens[:, 1:, None], -1)[..., 0]
    log_p_y = (log_p * mask).sum(1)
    penalty = ref.doubly_stochastic_penalty(out["alphas"], mask)
    return (-log_p_y + model.doubly_stochastic_lambda * penalty).mean(), log_p_y


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True])
def test_fit_and_evaluate_report_the_real_loss(jit):
    model, vocab = small_model(dropout=0.0, doubly_stochastic_lambda=0.3)
    data = batch(vocab)
    expected, _ = reference_loss(model, data)
    model.compile(optimizer=keras.optimizers.SGD(0.0), jit_compile=jit)
    logs = model.evaluate(data, batch_size=4, verbose=0, return_dict=True)
    np.testing.assert_allclose(logs["loss"], expected, rtol=1e-5)
    history = model.fit(data, batch_size=4, epochs=1, verbose=0)
    np.testing.assert_allclose(history.history["loss"][0], expected, rtol=1e-5)


@pytest.mark.slow
def test_hard_attention_trains_under_xla_and_updates_the_baseline():
    model, vocab = small_model("hard", dropout=0.0, hard_soft_probability=1.0, baseline_decay=0.9)
    data = batch(vocab)
    model.compile(optimizer=keras.optimizers.SGD(0.0), jit_compile=True)
    model.fit(data, batch_size=4, epochs=1, verbose=0)
    assert float(model.baseline) == 0.0  # captions with the expected context do not move it
    # The update itself (per-word log-likelihoods): only the rows that used samples count.
    log_p_y = np.array([-3.0, -5.0, -9.0, -1.0], np.float32)
    model.update_baseline(log_p_y, np.array([1, 0, 1, 0], np.float32))
    np.testing.assert_allclose(float(model.baseline), 0.1 * (-6.0), rtol=1e-6)
    model.update_baseline(log_p_y, np.zeros(4, np.float32))
    np.testing.assert_allclose(float(model.baseline), -0.6, rtol=1e-6)
    model.update_baseline(log_p_y)
    np.testing.assert_allclose(float(model.baseline), 0.9 * -0.6 + 0.1 * -4.5, rtol=1e-6)
    sampling, _ = small_model("hard", hard_soft_probability=0.0)
    sampling.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True)
    history = sampling.fit(batch(vocab, 8), batch_size=4, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])) and float(sampling.baseline) < 0.0


@pytest.mark.slow
def test_expected_context_baseline_pass():
    model, vocab = small_model("hard", dropout=0.3, reinforce_baseline="expected_context")
    data = batch(vocab)
    training = model(data, training=True)
    inference = model(data, training=False)
    np.testing.assert_allclose(training["baseline_logits"], inference["logits"], rtol=1e-5)
    assert "baseline_logits" not in inference
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True)
    history = model.fit(data, batch_size=4, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert Captioner.from_config(model.get_config()).reinforce_baseline == "expected_context"


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_keras_save_and_load_give_identical_outputs(tmp_path, attention):
    model, vocab = small_model(attention)
    data = batch(vocab)
    model.compile(optimizer="adam", jit_compile=False)
    model.fit(data, batch_size=4, epochs=2, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = load_captioner(tmp_path)
    assert loaded.get_config() == model.get_config()
    pixels = np.random.default_rng(5).uniform(0, 255, (2, 128, 128, 3)).astype("float32")
    inputs = {"images": pixels, "tokens": data["tokens"][:2]}
    np.testing.assert_array_equal(loaded(inputs)["logits"], model(inputs)["logits"])
    assert loaded.generate(pixels) == model.generate(pixels)
    assert float(loaded.baseline) == float(model.baseline)
    rebuilt = Captioner.from_config(model.get_config())
    assert rebuilt.count_params() == model.count_params()


@pytest.mark.slow
def test_generate_returns_captions_and_attention_maps(shapes_dir):
    model, _ = small_model()
    records = read_karpathy(shapes_dir / "dataset_shapes.json").split("test")[:3]
    details = model.generate([r.path for r in records], max_length=7, return_details=True)
    assert len(details) == 3
    for item in details:
        assert set(item["words"]) <= set(WORDS) | {"<unk>"}
        assert "<start>" not in item["words"] and "<pad>" not in item["words"]
        steps = min(len(item["words"]) + 1, 8)  # the words, then <end> (unless cut at 7)
        assert item["attention"].shape == (steps, 8, 8)
        np.testing.assert_allclose(item["attention"].sum(axis=(1, 2)), 1.0, rtol=1e-5)
    pixels = load_images([r.path for r in records], 128)
    assert model.generate(pixels, max_length=7) == [d["caption"] for d in details]
    with pytest.raises(KerasSaatError, match="exactly one of"):
        model.generate()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_decode_agrees_with_teacher_forcing(beam_size):
    """Feeding the decoded tokens back through `call` reproduces their log-probability
    (under the generation distribution, which excludes <pad> and <start>), for greedy
    decoding and for beam search."""
    model, vocab = small_model(dropout=0.0)
    data = batch(vocab, n=3)
    out = model.decode(data["features"], max_length=5, beam_size=beam_size)
    tokens = out["tokens"].numpy()
    inputs = np.concatenate([np.full((3, 1), 2, np.int32), tokens], axis=1)
    logits = model({"features": data["features"], "tokens": inputs})["logits"].numpy()
    logits = logits.astype(np.float64)
    logits[..., [PAD_ID, START_ID]] = -np.inf  # never generated
    log_p = np.take_along_axis(ref.log_softmax(logits), tokens[..., None], -1)[..., 0]
    mask = np.arange(tokens.shape[1])[None] < out["lengths"].numpy()[:, None]
    np.testing.assert_allclose(np.where(mask, log_p, 0.0).sum(1), out["log_prob"], rtol=1e-4)
    if beam_size == 1:
        np.testing.assert_array_equal(tokens[:, 0], np.argmax(logits[:, 0], -1))


@pytest.mark.slow
def test_beam_search_in_the_model():
    model, vocab = small_model(dropout=0.0, attention="hard")
    features = batch(vocab, n=5, seed=3)["features"]
    greedy = model.decode(features, max_length=6)
    beam_one = model.decode(features, max_length=6, beam_size=1)
    np.testing.assert_array_equal(greedy["tokens"], beam_one["tokens"])
    beam = model.decode(features, max_length=6, beam_size=4)
    model.decode_jit_compile = False
    eager = model.decode(features, max_length=6, beam_size=4)
    for key in ("tokens", "lengths", "log_prob", "alpha"):
        np.testing.assert_allclose(beam[key], eager[key], rtol=1e-5, atol=1e-6)
    alpha = beam["alpha"].numpy()
    steps = np.arange(alpha.shape[1])[None] < beam["lengths"].numpy()[:, None]
    np.testing.assert_allclose(alpha.sum(-1), steps.astype(np.float32), rtol=1e-5, atol=1e-6)
    captions = model.generate(features=features, max_length=6, beam_size=4, return_details=True)
    assert [c["words"] for c in captions] == model.postprocessor.words(beam["tokens"].numpy())
    assert captions[0]["attention"].shape == (int(beam["lengths"][0]), 8, 8)


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(KerasSaatError, match="no saved model"):
        load_captioner(tmp_path)
    (tmp_path / "model.keras").write_bytes(b"not a zip")
    with pytest.raises(KerasSaatError, match="cannot load the model"):
        load_captioner(tmp_path)


@pytest.mark.slow
def test_a_tiny_model_learns_to_caption_shapes_it_has_seen(shapes_dir):
    """Overfits 8 scenes: greedy captions become references of their own image."""
    records = read_karpathy(shapes_dir / "dataset_shapes.json").split("train")[:8]
    vocab = Vocabulary.build(c for r in records for c in r.references)
    keras.utils.set_random_seed(0)
    model = Captioner(
        vocab.words,
        feature_dim=64,
        embedding_dim=32,
        lstm_units=128,
        attention_units=64,
        dropout=0.0,
        doubly_stochastic_lambda=0.0,
        seed=0,
    )
    features = model.encode(load_images([r.path for r in records], 128)).numpy()
    # A random deep ReLU stack shrinks its output's scale; standardised, the features of
    # the eight scenes are as far apart as they are, and the decoder has to tell them apart.
    features = (features - features.mean()) / features.std()
    index = np.repeat(np.arange(8), 5)
    tokens = vocab.encode_batch([c for r in records for c in r.references], 16)
    data = tf.data.Dataset.from_tensor_slices({"features": features[index], "tokens": tokens})
    # Plain TensorFlow: 300 steps run in half the time they take under XLA at the suite's
    # LLVM -O0 (XLA's own training paths have their tests: the trainer's, hard attention's).
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    before = model.evaluate(data.batch(40), verbose=0, return_dict=True)["nll"]
    model.fit(
        data.shuffle(40, seed=0).batch(40).repeat(),
        steps_per_epoch=300,
        epochs=1,
        verbose=0,
        shuffle=False,
    )
    after = model.evaluate(data.batch(40), verbose=0, return_dict=True)["nll"]
    captions = model.generate(features=features, max_length=16)
    correct = sum(c.split() in r.references for c, r in zip(captions, records, strict=True))
    assert after < 0.25 * before
    assert correct >= 6, list(zip(captions, [r.captions[0] for r in records], strict=True))


def test_feature_dim_none_attends_over_the_backbone_features_themselves(tmp_path):
    """The paper's literal annotations: no squeeze, a = the (B, L, C) features, D = C."""
    model, vocab = small_model(feature_dim=None, dropout=0.0)
    assert model.squeeze is None and model.decoder.annotation_dim == 128
    data = batch(vocab)
    np.testing.assert_array_equal(model.annotate(data["features"]), data["features"])
    expected = ref.decoder(
        data["features"].astype(np.float64),
        data["tokens"][:, :-1],
        ref.decoder_weights(model.decoder),
    )
    np.testing.assert_allclose(model(data)["logits"], expected["logits"], rtol=1e-4, atol=1e-4)
    model.save(tmp_path / "model.keras")
    loaded = load_captioner(tmp_path)
    assert loaded.feature_dim is None and loaded.squeeze is None
    assert loaded.generate(features=data["features"]) == model.generate(features=data["features"])


def test_build_captioner_takes_every_model_config_field():
    from keras_saat.config import DecodeConfig, ModelConfig
    from keras_saat.models.factories import build_captioner

    config = ModelConfig(attention="hard", feature_dim=24, lstm_units=20, gating=False, seed=3)
    decode = DecodeConfig(max_length=9, beam_size=4, length_penalty=0.7)
    model = build_captioner(config, Vocabulary.build([WORDS]), decode, resize="pad")
    settings = model.get_config()
    for field in ("attention", "feature_dim", "lstm_units", "gating", "seed", "backbone"):
        assert settings[field] == getattr(config, field)
    assert settings["image_size"] == 128 and settings["resize"] == "pad"
    for field in ("max_length", "beam_size", "length_penalty"):
        assert settings[field] == getattr(decode, field)


def test_doubly_stochastic_lambda_defaults_to_the_attention_types(tmp_path):
    """Soft attention is regularised by Eq. 14 unless told otherwise; hard attention is not
    (the paper's Sec. 4.2.1); an explicit value wins, and a saved model keeps its value."""
    from keras_saat.config import ModelConfig
    from keras_saat.models.factories import build_captioner

    vocab = Vocabulary.build([WORDS])
    assert ModelConfig().doubly_stochastic_lambda is None
    for attention, default in (("soft", 1.0), ("hard", 0.0)):
        assert small_model(attention)[0].doubly_stochastic_lambda == default
        built = build_captioner(ModelConfig(attention=attention, feature_dim=16), vocab)
        assert built.doubly_stochastic_lambda == default
        told = small_model(attention, doubly_stochastic_lambda=0.25)[0]
        assert told.doubly_stochastic_lambda == 0.25
    model, _ = small_model("hard")
    path = tmp_path / "hard.keras"
    model.save(path)
    assert load_captioner(path).doubly_stochastic_lambda == 0.0


@pytest.mark.slow
def test_captioning_a_file_decodes_it_as_training_does(tmp_path):
    """A non-square photo is centre-cropped (data.resize), as in the cache and tf.data."""
    from PIL import Image

    from keras_saat.images.decoding import decode_image

    model, _ = small_model()
    rng = np.random.default_rng(9)
    photo = rng.integers(0, 256, (96, 200, 3), dtype=np.uint8)
    Image.fromarray(photo).save(tmp_path / "photo.png")
    as_trained = decode_image(tf.io.read_file(str(tmp_path / "photo.png")), 128, "crop").numpy()
    from_file = model.generate(tmp_path / "photo.png", return_details=True)[0]
    from_pixels = model.generate(as_trained[None], return_details=True)[0]
    assert from_file["words"] == from_pixels["words"]
    np.testing.assert_allclose(from_file["log_prob"], from_pixels["log_prob"], rtol=1e-5)
    np.testing.assert_allclose(
        model.preprocessor("crop")(photo)[0], as_trained, rtol=1e-5, atol=1e-3
    )
    stretched = model.preprocessor("stretch")(photo)[0]
    assert np.abs(stretched - as_trained).mean() > 10


@pytest.mark.slow
@pytest.mark.parametrize("source", ["features", "images"])
def test_a_split_is_captioned_with_one_compiled_decode_its_last_batch_padded(
    shapes_dir, tmp_path, source
):
    """8 images in batches of 3: the last batch of 2 runs padded to 3, and the captions
    are those of one batch of all 8 (rows are decoded apart)."""
    from keras_saat.config import ExperimentConfig
    from keras_saat.data.feature_cache.feature_cache import FeatureCache
    from keras_saat.data.feature_cache.feature_extraction import extract_features
    from keras_saat.data.pipeline.image_file_source import ImageFiles
    from keras_saat.experiment.scoring import caption_split

    model, _ = small_model(max_length=6)
    model.decode_jit_compile = False
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    records = dataset.split("test")
    config = ExperimentConfig()
    if source == "features":
        extract_features(model.encoder, dataset, tmp_path / "features", log=lambda _: None)
        source = FeatureCache(tmp_path / "features")
    else:
        source = ImageFiles(model.image_size, config.data.resize)
    for beam_size in (1, 2):
        padded = caption_split(model, source, "test", records, config, 3, beam_size, True)
        decode = model._decode_fns[(config.decode.max_length, beam_size, 0.0, False)]
        assert decode.experimental_get_tracing_count() == 1
        whole = caption_split(model, source, "test", records, config, 8, beam_size, True)
        assert sorted(padded) == sorted(whole) == list(range(len(records)))
        for position, (words, attention) in whole.items():
            assert padded[position][0] == words
            np.testing.assert_allclose(padded[position][1], attention, atol=1e-6)
