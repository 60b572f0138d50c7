"""The Keras user's path: own captions -> read_captions -> from_records -> fit -> save ->
a fresh process's `import keras_saat` + `keras.saving.load_model` -> generate."""

import json
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
from PIL import Image

import keras_saat
from keras_saat import Captioner
from keras_saat.errors import KerasSaatError
from tests.helpers import ROOT, shapes_caption_csv, small_model

TINY = dict(feature_dim=16, embedding_dim=8, lstm_units=16, attention_units=8, seed=1)


@pytest.fixture(scope="module")
def caption_csv(shapes_dir, tmp_path_factory):
    return shapes_caption_csv(shapes_dir, tmp_path_factory.mktemp("own_captions"))


FIVE_LINES = """
import json, keras, keras_saat, sys
data = keras_saat.data.read_captions(sys.argv[1])
model = keras_saat.Captioner.from_records(
    data.train, backbone="shapes_cnn_small_norm", backbone_weights="shapes",
    feature_dim=32, embedding_dim=32, lstm_units=64, attention_units=32, seed=0)
model.compile(optimizer=keras.optimizers.Adam(3e-3))
history = model.fit(data.train, validation_data=data.val, epochs=3, batch_size=16, verbose=0,
    callbacks=[keras.callbacks.ModelCheckpoint(sys.argv[2])])
print(json.dumps(history.history))
"""

RELOAD = """
import keras, keras_saat, sys
model = keras.saving.load_model(sys.argv[1])
print(type(model).__name__, type(model.optimizer).__name__, model.generate(sys.argv[2])[0])
"""


def python(code, *argv):
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, argv)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.slow
def test_five_lines_fit_save_reload_caption(caption_csv, tmp_path):
    best = tmp_path / "best.keras"
    history = json.loads(python(FIVE_LINES, caption_csv, best)[-1])
    assert history["nll"][-1] < history["nll"][0]  # it learns on the packaged CNN's features
    assert {"val_loss", "attention_penalty"} <= set(history)
    image = keras_saat.data.read_captions(caption_csv).test[0]
    kind, optimizer, caption = python(RELOAD, best, image.path)[-1].split(" ", 2)
    assert (kind, optimizer) == ("Captioner", "Adam")
    assert caption.split() and set(caption.split()) <= set(
        keras.saving.load_model(best).vocabulary.words
    )


def _scene(path, size):
    rng = np.random.default_rng(size[0])
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)).save(path)
    return path


@pytest.mark.parametrize("resize", ["crop", "pad", "stretch"])
def test_fit_batches_see_images_as_generate_does(resize, tmp_path):
    """The pixels fit() trains on are the pixels generate() decodes: same size, same rule."""
    from keras_saat.data.readers.caption_dataset import ImageRecord

    paths = [_scene(tmp_path / "wide.png", (90, 40)), _scene(tmp_path / "tall.png", (30, 70))]
    records = [ImageRecord(i, p, "val", ["a red circle"]) for i, p in enumerate(paths)]
    model = Captioner.from_records(records, resize=resize, **TINY)
    batches, steps = model.caption_batches(records, batch_size=2, training=False)
    (batch,) = list(batches)
    assert steps == 1 and batch["images"].shape == (2, model.image_size, model.image_size, 3)
    expected = model.preprocessor()(paths)
    np.testing.assert_array_equal(np.asarray(batch["images"]), np.asarray(expected))


def test_fit_on_records_learns_and_logs_what_the_loss_holds(shapes_dir):
    """Hard attention (lambda 0): no attention_penalty in the logs; a random frozen backbone warns."""
    data = keras_saat.data.read_captions(shapes_dir / "dataset_shapes.json")
    model = Captioner.from_records(data.train, attention="hard", **TINY)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    with pytest.warns(UserWarning, match="random weights and is frozen"):
        history = model.fit(data.train[:16], epochs=3, batch_size=16, verbose=0)
    assert set(history.history) == {"loss", "nll", "baseline"}
    assert history.history["nll"][-1] < history.history["nll"][0]
    assert model.familiarity_calibrated  # fit on records calibrates from them
    scores = model.evaluate(data.val, batch_size=8, verbose=0, return_dict=True)
    assert set(scores) == {"loss", "nll", "baseline"} and np.isfinite(scores["loss"])


def test_from_records_builds_the_vocabulary_of_the_captions(shapes_dir):
    data = keras_saat.data.read_captions(shapes_dir / "dataset_shapes.json")
    model = Captioner.from_records(data.train, max_vocabulary=10, **TINY)
    assert len(model.vocabulary) == 10
    assert model.vocabulary == keras_saat.Vocabulary.from_records(data.train, max_size=10)
    words = {w for r in data.train for c in r.references for w in c}
    assert set(model.vocabulary.words[4:]) <= words


def test_weights_backbone_does_not_warn(shapes_dir):
    data = keras_saat.data.read_captions(shapes_dir / "dataset_shapes.json")
    model = Captioner.from_records(
        data.train, backbone="shapes_cnn_small_norm", backbone_weights="shapes", **TINY
    )
    model.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.fit(data.train[:4], epochs=1, batch_size=8, verbose=0)


# ---------------------------------------------------------------- errors in our words
@pytest.fixture(scope="module")
def model():
    return small_model()[0]


def test_fit_with_arrays_names_what_it_takes(model):
    images, tokens = np.zeros((4, 128, 128, 3)), np.zeros((4, 7), np.int32)
    with pytest.raises(KerasSaatError, match=r"takes caption records .* not an array of shape"):
        model.fit(images, tokens)


def test_predict_points_at_generate(model):
    with pytest.raises(KerasSaatError, match=r"predict is not defined .* model.generate"):
        model.predict(np.zeros((1, 128, 128, 3)))


def test_fit_with_missing_images_names_them(model, tmp_path):
    from keras_saat.data.readers.caption_dataset import ImageRecord

    records = [ImageRecord(0, tmp_path / "gone.png", "train", ["a red circle"])]
    with pytest.raises(KerasSaatError, match=r"1 of 1 training images are missing .*gone.png"):
        model.fit(records, epochs=1)


def test_fit_with_another_vocabulary_says_to_build_one(model, shapes_dir, tmp_path):
    from keras_saat.data.readers.caption_dataset import ImageRecord

    image = next((shapes_dir / "images").glob("*.png"))
    records = [ImageRecord(0, image, "train", ["zebra grazing beside the old barn"])]
    with pytest.raises(
        KerasSaatError, match=r"\d+% of the training captions' words .*from_records"
    ):
        model.fit(records, epochs=1, batch_size=1)


def test_fit_with_the_whole_dataset_asks_for_a_split(model, shapes_dir):
    data = keras_saat.data.read_captions(shapes_dir / "dataset_shapes.json")
    with pytest.raises(KerasSaatError, match=r"pass data.train"):
        model.fit(data)


def test_fit_with_validation_split_asks_for_validation_data(model, shapes_dir):
    data = keras_saat.data.read_captions(shapes_dir / "dataset_shapes.json")
    with pytest.raises(KerasSaatError, match=r"give validation_data=data.val"):
        model.fit(data.train, validation_split=0.1)


def test_compile_takes_no_loss(model):
    with pytest.raises(KerasSaatError, match=r"takes no loss or metrics"):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")


def test_compile_resolves_xla_as_the_command_line_does():
    from keras_saat.runtime.xla import resolve_jit_compile

    model = small_model()[0]
    model.compile()
    assert model.jit_compile == resolve_jit_compile("auto")
    assert type(model.optimizer).__name__ == "Adam"


def test_fit_takes_keras_positional_arguments_and_its_validation_batch_size(shapes_dir):
    """fit(x, y, batch_size, epochs, verbose) as Keras orders them; the validation records
    are cut at the same batch size (or validation_batch_size)."""
    data = keras_saat.data.read_captions(shapes_dir / "dataset_shapes.json")
    model = Captioner.from_records(data.train, **TINY)
    model.compile()

    class Batches(keras.callbacks.Callback):
        def on_test_begin(self, logs=None):
            self.count = 0

        def on_test_batch_end(self, batch, logs=None):
            self.count += 1

    counted = Batches()
    val = data.val[:2]  # 10 captions
    with pytest.warns(UserWarning, match="random weights"):
        history = model.fit(data.train[:4], None, 4, 1, 0, [counted], 0.0, val)
    assert len(history.history["loss"]) == 1 and counted.count == 3  # ceil(10 / 4)
    model.fit(
        data.train[:4], batch_size=4, validation_data=val, validation_batch_size=5, verbose=0,
        callbacks=[counted],
    )  # fmt: skip
    assert counted.count == 2
    model.evaluate(val, None, 5, 0, callbacks=[counted])
    assert counted.count == 2


def test_empty_records_say_so(model):
    from keras_saat.data.readers.caption_dataset import ImageRecord

    one = [ImageRecord(0, ROOT / "no-such.png", "train", ["a red circle"])]
    with pytest.raises(KerasSaatError, match=r"validation_data holds no records .* split column"):
        model.fit(one, validation_data=[])
    with pytest.raises(KerasSaatError, match=r"x holds no records"):
        model.fit([])
