"""`keras-saat extract-features --runner`: the one-process feature cache, written by Beam."""

import json
import os
import shutil

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.test_pipeline import TestPipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from keras_saat.cli import main  # noqa: E402
from keras_saat.data.feature_cache.feature_cache import FeatureCache  # noqa: E402
from tests.helpers import DEFAULTS  # noqa: E402

TWO_PROCESSES = ["--", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


@pytest.fixture(scope="module")
def shapes(shapes_dir, tmp_path_factory):
    """The shared Shapes set (40 train, 8 val, 8 test) with train image 2 corrupt."""
    target = tmp_path_factory.mktemp("beam_extract") / "shapes"
    shutil.copytree(shapes_dir, target)
    records = json.loads((target / "dataset_shapes.json").read_text())["images"]
    corrupt = next(r for r in records if r["split"] == "train")  # position 0 of train
    path = target / corrupt["filepath"] / corrupt["filename"]
    path.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return target, f"{path} (image {corrupt['imgid']})"


def argv(shapes, workdir, *extra):
    return ["extract-features", "--config", DEFAULTS, "--workdir", str(workdir),
            "--set", "data.dataset=karpathy",
            "--set", f"data.path={shapes / 'dataset_shapes.json'}",
            "--set", "data.cache_shard_size=16", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def single(shapes, tmp_path_factory):
    """The one-process cache of `shapes`."""
    workdir = tmp_path_factory.mktemp("single")
    assert main(argv(shapes[0], workdir)) == 0
    return workdir / "features"


def assert_same_cache(found, expected):
    """The same index.json (each shard's stamps and the hash of its images' bytes
    included: a copy of either with new file times keeps its features), shard files, and
    every record's position and features (to the last bits of a convolution)."""
    found, expected = FeatureCache(found), FeatureCache(expected)
    assert all(s["content"] for e in found.index["splits"].values() for s in e["shards"])
    assert found.index == expected.index
    assert sorted(p.name for p in found.directory.iterdir()) == sorted(
        p.name for p in expected.directory.iterdir()
    )  # nothing else left behind (the run's lists and records)
    for split in expected.splits:
        for ours, theirs in zip(found.files(split), expected.files(split), strict=True):
            pairs = zip(found.read_shard(ours), expected.read_shard(theirs), strict=True)
            for (positions, features, scales), (want_positions, want_features, want) in pairs:
                np.testing.assert_array_equal(positions.numpy(), want_positions.numpy())
                # The workers batch images otherwise than the one process, and oneDNN may
                # pick another convolution for another batch size: the last bits may differ.
                assert features.dtype == want_features.dtype
                np.testing.assert_allclose(
                    features.numpy().astype("float32"),
                    want_features.numpy().astype("float32"),
                    rtol=0.02,
                    atol=1.0 if features.dtype.is_integer else 1e-3,
                )
                assert (scales is None) == (want is None)
                if want is not None:  # an int8 cache's per-image channel scales
                    np.testing.assert_allclose(scales.numpy(), want.numpy(), rtol=0.02)


@pytest.mark.slow
def test_a_beam_cache_equals_the_one_process_cache_and_train_reads_it(
    shapes, single, tmp_path, capsys
):
    folder, corrupt = shapes
    workdir = tmp_path / "beam"
    capsys.readouterr()
    assert main(argv(folder, workdir, "--runner", "local", "--batch-size", "5")) == 0
    out = capsys.readouterr().out
    assert f"skipped 1 x undecodable image (first: {corrupt})" in out
    assert "39 train, 8 val, 8 test images, grid (8, 8), 128 channels" in out
    assert_same_cache(workdir / "features", single)
    assert FeatureCache(workdir / "features").skipped("train") == [(0, "undecodable image")]

    # A stopped run: shard 1 written with its record in .beam, but not yet in index.json.
    index_path = workdir / "features" / "index.json"
    index = json.loads(index_path.read_text())
    shard = index["splits"]["train"]["shards"][1]
    record = {"split": "train", "shard": 1, "written": shard["written"],
              "skipped": shard["skipped"], "skips": {}, "inputs": shard["inputs"],
              "content": shard["content"]}  # fmt: skip
    shard.update(done=False, written=0)
    index_path.write_text(json.dumps(index))
    (workdir / "features" / ".beam").mkdir()
    (workdir / "features" / ".beam" / f"{shard['file']}.json").write_text(json.dumps(record))
    # And shard 2 deleted (damaged): written again, the others kept.
    (workdir / "features" / "train-00002-of-00003.tfrecord").unlink()
    kept = {
        name: os.stat(workdir / "features" / name).st_mtime_ns
        for name in ("train-00000-of-00003.tfrecord", "train-00001-of-00003.tfrecord")
    }
    assert main(argv(folder, workdir, "--runner", "local")) == 0
    out = capsys.readouterr().out
    assert "extract train: 2/3 shards already done, extracting the other 1" in out
    assert "extract: 1 shards on Beam's local runner" in out
    assert "extract val: cached (8 images)" in out
    for name, stamp in kept.items():
        assert os.stat(workdir / "features" / name).st_mtime_ns == stamp
    assert_same_cache(workdir / "features", single)

    # A stopped run again, and then one of its shard's images changed (content and
    # stamp): the record was written from the old image, so that shard is extracted anew.
    index = json.loads(index_path.read_text())
    shard = index["splits"]["train"]["shards"][1]
    record.update(inputs=shard["inputs"])
    shard.update(done=False, written=0)
    index_path.write_text(json.dumps(index))
    (workdir / "features" / ".beam").mkdir()
    (workdir / "features" / ".beam" / f"{shard['file']}.json").write_text(json.dumps(record))
    kept = os.stat(workdir / "features" / shard["file"]).st_mtime_ns
    records = json.loads((folder / "dataset_shapes.json").read_text())["images"]
    changed = [r for r in records if r["split"] == "train"][16]  # position 16: shard 1
    changed = folder / changed["filepath"] / changed["filename"]
    original, stamp = changed.read_bytes(), os.stat(changed)
    shutil.copy(folder / records[-1]["filepath"] / records[-1]["filename"], changed)
    try:
        assert main(argv(folder, workdir, "--runner", "local")) == 0
        assert "extract: 1 shards on Beam's local runner" in capsys.readouterr().out
        assert os.stat(workdir / "features" / shard["file"]).st_mtime_ns != kept

        # `train` builds the same seeded encoder and reads the Beam-made cache.
        steps = ["--set", "train.epochs=1", "--set", "train.batch_size=16"]
        steps += ["--set", "decode.meteor=false"]  # the test split's scores are not read
        assert main(["train", *argv(folder, workdir)[1:], *steps]) == 0
        out = capsys.readouterr().out
        assert "extract train: cached (40 images)" in out and "epoch 1/1" in out
    finally:  # the module's other tests see the images as they were, file times included
        changed.write_bytes(original)
        os.utime(changed, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


@pytest.mark.slow
def test_two_worker_processes_write_the_same_int8_cache(shapes, tmp_path, capsys):
    """The compact format (int8 rows, their scales, zlib) from two worker processes."""
    int8 = ["--set", "data.cache_dtype=int8", "--set", "data.cache_compression=zlib"]
    assert main(argv(shapes[0], tmp_path / "one", *int8)) == 0
    workdir = tmp_path / "two"
    assert main(argv(shapes[0], workdir, *int8, "--runner", "local", *TWO_PROCESSES)) == 0
    out = capsys.readouterr().out
    assert f"skipped 1 x undecodable image (first: {shapes[1]})" in out
    assert "int8+zlib" in out
    assert FeatureCache(workdir / "features").index["compression"] == "zlib"
    assert_same_cache(workdir / "features", tmp_path / "one" / "features")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runner", "mars"], "--runner mars: not a Beam runner here; give one of local,"),
        (["--runner", "local", "--batch-size", "0"], "--batch-size 0: give at least 1"),
        (["--batch-size", "8"], "--batch-size is for a Beam run: add --runner local"),
        (["--large-model"], "--large-model is for a Beam run: add --runner local"),
    ],
)
def test_runner_mistakes_are_one_line(shapes, tmp_path, capsys, extra, message):
    assert main(argv(shapes[0], tmp_path / "w", *extra)) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_missing_files_and_a_batch_the_encoder_raises_on_are_skips_not_failures(shapes, tmp_path):
    """ExtractFeatures in a TestPipeline: a missing file and an image whose batch the
    encoder raises on are named in the shard's record; the others are written."""
    import tensorflow as tf

    from keras_saat.beam.extraction import (
        EncoderHandler,
        ExtractFeatures,
        save_encoder_weights,
        write_shard_list,
    )
    from keras_saat.data import read_karpathy
    from keras_saat.data.feature_cache.cache_format import encoder_fingerprint
    from keras_saat.encoders import ImageEncoder

    class RaisingHandler(EncoderHandler):
        def run_inference(self, batch, model, inference_args=None):
            if any(pixels.max() == 0 for pixels in batch):
                raise RuntimeError("the encoder gave up on a black image")
            return super().run_inference(batch, model, inference_args)

    records = read_karpathy(shapes[0] / "dataset_shapes.json").split("val")[:3]
    black = tmp_path / "black.png"
    black.write_bytes(tf.io.encode_png(tf.zeros((32, 32, 3), tf.uint8)).numpy())
    records[1].path, records[2].path = black, tmp_path / "missing.png"
    tf.keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn")
    fingerprint = encoder_fingerprint(encoder, "crop", "float16")
    directory = tmp_path / "cache"
    weights = save_encoder_weights(encoder, directory, fingerprint)
    file = "val-00000-of-00001.tfrecord"
    write_shard_list(directory, "val", 0, file, enumerate(records), "inputs as launched")
    handler = RaisingHandler("shapes_cnn", 128, weights, "float16", "crop", fingerprint,
                             batch_size=1)  # fmt: skip
    place = lambda r: f"{r.path} (image {r.imgid})"  # noqa: E731
    expected = {
        "split": "val",
        "shard": 0,
        "inputs": "inputs as launched",
        "content": None,  # the files' stamps are not those the launcher recorded
        "written": 1,
        "skipped": [[1, "undecodable image"], [2, "missing image file"]],
        "skips": {
            "the encoder raised RuntimeError: the encoder gave up on a black image": [
                place(records[1])
            ],
            "missing image file": [place(records[2])],
        },
    }
    with TestPipeline(runner=FnApiRunner()) as pipeline:
        done = (
            pipeline
            | beam.Create(["val-00000-of-00001.tfrecord"])
            | ExtractFeatures(str(directory), handler, 128)
        )
        assert_that(done, equal_to([expected]))
    written = list(tf.data.TFRecordDataset(str(directory / "val-00000-of-00001.tfrecord")))
    assert len(written) == 1


@pytest.mark.parametrize(
    "field,value",
    [("written", "4"), ("written", -1), ("written", 10**9), ("skipped", "xy"),
     ("skipped", [[99, "x"]]), ("content", 7), ("content", "not a hash")],
)  # fmt: skip
def test_a_beam_record_of_another_shape_is_not_folded(tmp_path, field, value):
    """A shard's record in CACHE/.beam (a stopped run's, or one planted there) is folded
    into the index only with the layout's fields; another shape leaves the shard to be
    written again rather than an index.json no cache opens."""
    from keras_saat.beam.extraction import BEAM_DIR, DONE_SUFFIX
    from keras_saat.beam.extraction_runs import _fold_finished
    from keras_saat.data.readers.caption_dataset import Skips

    file = "train-00000-of-00001.tfrecord"
    (tmp_path / file).write_bytes(b"written by a worker")
    (tmp_path / BEAM_DIR).mkdir()
    record = {"split": "train", "shard": 0, "inputs": "stamps", "content": "0123abcd" * 4,
              "written": 4, "skipped": [[1, "undecodable image"]], "skips": {}}  # fmt: skip

    def fold(record):
        shard = {"file": file, "done": False, "written": 0, "skipped": []}
        index = {"splits": {"train": {"count": 5, "shard_size": 5, "shards": [shard]}}}
        (tmp_path / BEAM_DIR / (file + DONE_SUFFIX)).write_text(json.dumps(record))
        folded = _fold_finished(tmp_path, index, "train", [0], Skips(), {0: "stamps"})
        return folded, shard

    folded, shard = fold(record)
    assert folded == [0] and shard["done"] and shard["content"] == record["content"]
    folded, shard = fold({**record, field: value})
    assert folded == [] and not shard["done"]


@pytest.mark.slow
def test_a_stopped_runs_leftovers_are_swept_and_its_encoder_file_never_read(
    shapes, single, tmp_path, capsys
):
    """What a killed run leaves in the cache folder: a shard's temporary (its process
    gone), another writer's day-old `*.tfrecord.tmp-*`, and an encoder file in CACHE/.beam
    that holds other weights. The next run sweeps the temporaries, writes the encoder
    file anew, and makes the one-process cache."""
    import time

    from keras_saat.io_utils import STALE_AFTER_S
    from tests.helpers import killed_write

    workdir = tmp_path / "w"
    cache = workdir / "features"
    (cache / ".beam").mkdir(parents=True)
    encoder = json.loads((single / "index.json").read_text())["fingerprint"]["encoder"]
    np.savez(cache / ".beam" / f"encoder-{encoder}.npz", w0=np.zeros((3, 3, 3, 32)))
    killed_write(cache / "val-00000-of-00001.tfrecord")
    planted = cache / "train-00000-of-00003.tfrecord.tmp-4242"
    planted.write_bytes(b"another writer's")
    old = time.time() - STALE_AFTER_S - 60
    os.utime(planted, (old, old))
    assert main(argv(shapes[0], workdir, "--runner", "local")) == 0
    logged = capsys.readouterr().out
    assert f"removed 2 temporary file(s) of writers that were stopped in {cache}" in logged
    assert_same_cache(cache, single)


@pytest.mark.parametrize("crafted", ["other values", "other arrays", "not an npz"])
def test_an_encoder_file_of_other_weights_is_refused(tmp_path, crafted):
    """The workers rebuild the encoder from CACHE/.beam/encoder-*.npz only when its
    weights give the cache's fingerprint: features of other weights are never written."""
    import keras

    from keras_saat.beam.extraction import EncoderHandler, save_encoder_weights
    from keras_saat.data.feature_cache.cache_format import encoder_fingerprint
    from keras_saat.encoders import ImageEncoder
    from keras_saat.errors import KerasSaatError

    keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn")
    fingerprint = encoder_fingerprint(encoder, "crop", "float16")
    weights = save_encoder_weights(encoder, tmp_path, fingerprint)
    if crafted == "other values":
        saved = np.load(weights)
        np.savez(weights, **{k: np.zeros_like(saved[k]) for k in saved.files})
    elif crafted == "other arrays":
        np.savez(weights, w0=np.zeros(3))
    else:
        with open(weights, "wb") as out:
            out.write(b"PK\x03\x04 not a zip")
    handler = EncoderHandler("shapes_cnn", 128, weights, "float16", "crop", fingerprint)
    with pytest.raises(KerasSaatError) as raised:
        handler.load_model()
    if crafted == "other values":
        assert f"not the cache's {fingerprint}" in str(raised.value)
    else:
        assert str(raised.value).startswith(f"{weights} does not hold the encoder's weights")
