"""CaptionMetrics under fit(): scores in logs, read by ModelCheckpoint, EarlyStopping, TensorBoard."""

import keras
import pytest
import tensorflow as tf

from keras_saat import Captioner, Vocabulary
from keras_saat.callbacks import CaptionMetrics
from keras_saat.data import read_karpathy
from keras_saat.data.pipeline.batch_plan import BatchPlan
from keras_saat.data.pipeline.image_file_source import ImageFiles
from keras_saat.data.pipeline.input_pipeline import caption_batches, token_table
from keras_saat.errors import KerasSaatError
from keras_saat.evaluation.coco_metrics import coco_scores


@pytest.fixture(scope="module")
def shapes(shapes_dir):
    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    train, val = dataset.split("train"), dataset.split("val")
    vocabulary = Vocabulary.build(c for r in train for c in r.references)
    return train, val, vocabulary


def tiny_model(vocabulary):
    return Captioner(
        vocabulary.words,
        feature_dim=16,
        embedding_dim=8,
        lstm_units=16,
        attention_units=8,
        max_length=8,
        beam_size=1,
        seed=0,
    )


def summary_tags(log_dir):
    tags = set()
    for path in log_dir.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    return tags


@pytest.mark.slow
def test_fit_logs_the_scores_that_model_checkpoint_and_tensorboard_read(shapes, tmp_path):
    train, val, vocabulary = shapes
    model = tiny_model(vocabulary)
    plan = BatchPlan(16, seed=0, repeat=True)
    data = caption_batches(ImageFiles(128), "train", train, token_table(train, vocabulary, 8), plan)
    metrics = CaptionMetrics(val, log_dir=tmp_path / "logs", images=1)
    best = tmp_path / "best.keras"
    checkpoint = keras.callbacks.ModelCheckpoint(
        best, monitor="val_bleu4", mode="max", save_best_only=True
    )
    model.compile(optimizer=keras.optimizers.Adam(5e-3))
    history = model.fit(
        data, epochs=2, steps_per_epoch=4, callbacks=[metrics, checkpoint], verbose=0
    )
    logged = history.history
    for key in ("val_bleu1", "val_bleu4", "val_rouge_l", "val_cider"):
        assert len(logged[key]) == 2, key

    # The last epoch's scores are those of the model's own greedy captions.
    captions = model.generate([r.path for r in val], beam_size=1)
    expected = coco_scores([r.captions for r in val], captions, use_java=False)
    assert logged["val_bleu4"][-1] == pytest.approx(expected["bleu_4"])
    assert logged["val_cider"][-1] == pytest.approx(expected["cider"])
    assert metrics.scores["bleu_4"] == pytest.approx(expected["bleu_4"])
    assert best.is_file()
    assert {"val/bleu_4", "val/cider", "attention/0"} <= summary_tags(tmp_path / "logs")


@pytest.mark.slow
def test_early_stopping_reads_the_score(shapes):
    train, val, vocabulary = shapes
    model = tiny_model(vocabulary)
    plan = BatchPlan(16, seed=0, repeat=True)
    data = caption_batches(ImageFiles(128), "train", train, token_table(train, vocabulary, 8), plan)
    # No BLEU gain exceeds min_delta 2 (scores are 0-1), so after the first epoch none
    # counts as an improvement and EarlyStopping stops at the second: it can only do so
    # if it reads val_bleu4 (with a missing monitor it never stops).
    stop = keras.callbacks.EarlyStopping(monitor="val_bleu4", mode="max", min_delta=2.0, patience=1)
    model.compile(optimizer=keras.optimizers.Adam(5e-3))
    history = model.fit(
        data,
        epochs=3,
        steps_per_epoch=2,
        callbacks=[
            CaptionMetrics((([r.path for r in val]), [r.captions for r in val]), images=0),
            stop,
        ],
        verbose=0,
    )
    assert len(history.history["loss"]) == 2


def test_bad_validation_data_is_a_clear_error(shapes):
    _, val, _ = shapes
    with pytest.raises(KerasSaatError, match="one list of reference captions per image"):
        CaptionMetrics(([r.path for r in val], [r.captions for r in val[:-1]]))
    with pytest.raises(KerasSaatError, match="records with .path and .captions"):
        CaptionMetrics(["a.png", "b.png"])
