"""`keras-saat caption`: folders and globs, JSON lines and CSV rows, resume, bad files as rows."""

import csv
import json
import shutil
import threading

import numpy as np
import pytest

from keras_saat import Captioner
from keras_saat.cli import main
from keras_saat.cli.caption_files import read_attention
from tests.helpers import small_model


@pytest.fixture
def photos(shapes_dir, tmp_path):
    """A folder of 5 Shapes images (2 in a sub-folder), a broken PNG and a text file."""
    root = tmp_path / "photos"
    (root / "sub").mkdir(parents=True)
    for i, path in enumerate(sorted((shapes_dir / "images").glob("*.png"))[:5]):
        shutil.copy(path, (root if i < 3 else root / "sub") / path.name)
    (root / "sub" / "broken.png").write_bytes(b"not a png")
    (root / "notes.txt").write_text("not an image")
    return root


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_folder_to_json_lines_with_attention_and_a_broken_file(
    small_preset, photos, tmp_path, capsys
):
    out = tmp_path / "captions.jsonl"
    code, _, err = run(
        capsys, "caption", "--preset", small_preset, photos, "--out", out, "--attention",
        "--batch-size", 2,
    )  # fmt: skip
    assert code == 2 and "broken.png" in err and "1 of 6 images could not be captioned" in err
    rows = read_jsonl(out)
    images = sorted(p for p in photos.rglob("*.png"))
    assert sorted(r["image"] for r in rows) == sorted(str(p) for p in images)
    broken = [r for r in rows if r["image"].endswith("broken.png")]
    assert broken[0]["caption"] is None and "not an image" in broken[0]["error"]

    model = Captioner.from_preset(small_preset)
    good = [p for p in images if p.name != "broken.png"]
    expected = model.generate(good, return_details=True)  # the model's own beam size, 2
    by_image = {r["image"]: r for r in rows}
    grid = model.grid_shape
    for path, want in zip(good, expected, strict=True):
        row = by_image[str(path)]
        assert row["caption"] == want["caption"] and row["error"] == ""
        np.testing.assert_allclose(row["log_prob"], want["log_prob"], atol=1e-4)
        attention = read_attention(out, row)  # from the .npy shard beside the file
        # One map a step: the words, and <end> when the caption ended before max_length.
        assert attention.shape == np.asarray(want["attention"]).shape
        assert attention.shape[1:] == grid and len(attention) in (
            len(want["words"]) + 1,
            len(want["words"]),
        )
        np.testing.assert_allclose(attention.sum(axis=(1, 2)), 1.0, atol=1e-3)


@pytest.mark.slow
def test_a_second_run_skips_what_is_captioned_and_retries_failures(
    small_preset, photos, tmp_path, capsys
):
    out = tmp_path / "captions.jsonl"
    assert run(capsys, "caption", "--preset", small_preset, photos, "--out", out)[0] == 2
    first = read_jsonl(out)
    code, stdout, err = run(capsys, "caption", "--preset", small_preset, photos, "--out", out)
    assert code == 2 and "5 images already captioned" in stdout and "1 of 1 images" in err
    assert len(read_jsonl(out)) == 6  # the failed row replaced, not repeated

    shutil.copy(next(photos.glob("*.png")), photos / "sub" / "broken.png")  # now readable
    code, stdout, _ = run(capsys, "caption", "--preset", small_preset, photos, "--out", out)
    assert code == 0 and "wrote 1 captions" in stdout
    rows = read_jsonl(out)
    assert len(rows) == 6 and all(r["error"] == "" for r in rows)
    assert rows[:5] == [r for r in first if not r["error"]]  # earlier rows kept as they were


@pytest.mark.slow
def test_a_glob_to_csv_and_bad_arguments(small_preset, photos, tmp_path, capsys):
    out = tmp_path / "captions.csv"
    code, _, _ = run(capsys, "caption", "--preset", small_preset, f"{photos}/*.png", "--out", out)
    assert code == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["image"] for r in rows] == sorted(str(p) for p in photos.glob("*.png"))
    assert list(rows[0]) == ["image", "caption", "log_prob", "novelty", "familiar", "error"]
    assert rows[0]["novelty"] == "" and rows[0]["familiar"] == "True"  # never calibrated

    code, _, err = run(
        capsys, "caption", "--preset", small_preset, photos, "--out", out, "--attention"
    )
    assert code == 2 and "do not fit a CSV cell" in err
    code, _, err = run(capsys, "caption", "--preset", small_preset, f"{photos}/*.gif")
    assert code == 2 and "holds no image files" in err
    code, _, err = run(
        capsys, "caption", "--preset", small_preset, photos, "--out", tmp_path / "x.txt"
    )
    assert code == 2 and ".jsonl (JSON lines) or .csv" in err


@pytest.mark.slow
def test_a_missing_file_among_others_is_reported_once(small_preset, photos, tmp_path, capsys):
    image, missing = sorted(photos.glob("*.png"))[0], tmp_path / "missing.png"
    code, out, err = run(capsys, "caption", "--preset", small_preset, image, missing)
    assert code == 2 and out.startswith(f"{image}: ")
    assert err.count(str(missing)) == 1 and "1 of 2 images could not be captioned" in err, err


@pytest.mark.slow
def test_generate_stream_reads_a_generator_a_few_batches_ahead(shapes_dir):
    """Streaming: after the first caption, only a few batches of files have been read."""
    model, _ = small_model(beam_size=1)
    paths = sorted((shapes_dir / "images").glob("*.png"))
    pulled = []

    def files():
        for path in paths * 4:  # 224 files
            pulled.append(path)
            yield path

    stream = model.generate_stream(files(), batch_size=4)
    first = next(stream)
    assert first["error"] == "" and first["image"] == str(paths[0])
    assert len(pulled) <= 4 * 6  # the batch decoded plus tf.data's prefetch, not all 224
    rest = list(stream)
    assert len(rest) == len(paths) * 4 - 1 and len(pulled) == len(paths) * 4


def test_later_generate_calls_over_files_reuse_the_traced_batch_decoder(shapes_dir):
    """A notebook or a callback calls `generate` again and again: the files' batch decoder
    is traced once a process, and a stream stopped early leaves no reader behind."""
    from keras_saat.images.decoding import batch_decoder

    model, _ = small_model(beam_size=1)
    paths = sorted((shapes_dir / "images").glob("*.png"))
    decoder = batch_decoder(model.image_size, model.resize, model.max_pixels)
    first = model.generate(paths[:3], batch_size=2)
    traced = decoder.experimental_get_tracing_count()
    assert traced >= 1
    assert model.generate(paths[:3], batch_size=2) == first
    mixed = [paths[3], b"not an image", paths[4]]
    assert model.generate(mixed, batch_size=4, errors="skip")[1] is None
    assert decoder.experimental_get_tracing_count() == traced
    stream = model.generate_stream(paths, batch_size=2)
    next(stream)
    stream.close()  # the reader thread ends with it, once the batch in hand is read
    for thread in threading.enumerate():
        if thread.name == "keras-saat-read":
            thread.join(timeout=60)
            assert not thread.is_alive()


@pytest.mark.slow
def test_a_file_name_that_is_not_utf8_is_an_error_row(small_preset, photos, tmp_path, capsys):
    import os

    bad = os.path.join(os.fsencode(photos), b"caf\xe9.png")
    shutil.copy(next(photos.glob("*.png")), bad)
    out = tmp_path / "captions.csv"
    for _ in range(2):  # and again: a rerun retries it, it never crashes the run
        code, _, err = run(capsys, "caption", "--preset", small_preset, photos, "--out", out)
        assert code == 2 and "caf\\xe9.png: the file name is not valid UTF-8" in err
        assert "2 of 7 images" in err or "2 of 2 images" in err  # broken.png too
    with out.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 7 and sum(bool(r["error"]) for r in rows) == 2  # broken.png too
    assert [r["image"] for r in rows].count(f"{photos}/caf\\xe9.png") == 1


@pytest.mark.slow
def test_the_csv_header_is_written_once_and_a_missing_folder_is_named(
    small_preset, photos, tmp_path, capsys
):
    out = tmp_path / "captions.csv"
    run(capsys, "caption", "--preset", small_preset, photos / "sub" / "broken.png", "--out", out)
    run(capsys, "caption", "--preset", small_preset, photos / "sub" / "broken.png", "--out", out)
    assert out.read_text().count("image,caption,log_prob,novelty,familiar,error") == 1
    missing = tmp_path / "nowhere" / "captions.csv"
    code, _, err = run(capsys, "caption", "--preset", small_preset, photos, "--out", missing)
    assert code == 2 and "the folder" in err and "does not exist" in err and "Traceback" not in err


@pytest.mark.slow
def test_plots_one_figure_per_input_named_after_it(
    small_preset, photos, shapes_dir, tmp_path, capsys
):
    from PIL import Image

    from keras_saat.cli.caption import plot_names
    from keras_saat.images.image_files import find_images

    # Another scene under the name of one in the folder above: two inputs share a stem.
    first = sorted(photos.glob("*.png"))[0]
    shutil.copy(sorted((shapes_dir / "images").glob("*.png"))[5], photos / "sub" / first.name)
    plots = tmp_path / "plots"
    plots.mkdir()
    code, out, err = run(
        capsys, "caption", "--preset", small_preset, photos, "--plot", plots / "att.png"
    )
    assert code == 2 and "1 of 7 images could not be captioned" in err  # broken.png
    good = [p for p in find_images([photos]) if p.name != "broken.png"]
    expected = plot_names(plots / "att.png", find_images([photos]))
    # Two inputs share a stem (photos/X.png, photos/sub/X.png): each has its own figure.
    assert len({p.stem for p in good}) == len(good) - 1
    written = sorted(plots.iterdir())
    assert written == sorted(expected[str(p)] for p in good)
    assert all(f"attention plot: {expected[str(p)]}" in out for p in good)
    pixels = [np.asarray(Image.open(path).convert("RGB")) for path in written]
    assert all(p.shape[0] > 100 and p.shape[1] > 100 for p in pixels)
    # Each figure shows its own image: no two are the same pixels.
    assert len({p.tobytes() for p in pixels}) == len(pixels)


@pytest.mark.slow
def test_the_command_prints_no_tensorflow_log_lines(small_preset, photos):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    image = sorted(photos.glob("*.png"))[0]
    result = subprocess.run(
        [sys.executable, "-m", "keras_saat.cli", "caption", "--preset", str(small_preset), str(image)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith(f"{image}: ")
    assert result.stderr == ""


@pytest.mark.slow
def test_a_keras_file_captions_and_evaluates_as_its_workdir(
    trained_workdir, test_images, shapes_dir, tmp_path, capsys
):
    """`--workdir best.keras`: the workdir's model saved as a file (what `model.save` or
    `ModelCheckpoint` writes after `fit()`) captions as the workdir does, its decoding
    settings read from the model; `evaluate` scores it on a dataset named with --set."""
    from keras_saat import load_captioner

    load_captioner(trained_workdir).save(tmp_path / "best.keras")
    code, by_workdir, _ = run(capsys, "caption", "--workdir", trained_workdir, *test_images)
    assert code == 0 and len(by_workdir.splitlines()) == len(test_images)
    code, by_file, _ = run(capsys, "caption", "--workdir", tmp_path / "best.keras", *test_images)
    assert code == 0 and by_file == by_workdir

    out = tmp_path / "scores"
    code, stdout, _ = run(
        capsys, "evaluate", "--workdir", tmp_path / "best.keras", "--beam-size", 1,
        "--set", "data.dataset=karpathy", "--set", f"data.path={shapes_dir / 'dataset_shapes.json'}",
        "--set", "decode.meteor=false", "--out", out,
    )  # fmt: skip
    assert code == 0 and "test scores (greedy" in stdout
    assert len(json.loads((out / "predictions.json").read_text())) == 8


@pytest.mark.slow
def test_max_pixels_sets_the_largest_image_and_its_error_names_the_flag(
    small_preset, photos, capsys
):
    image = sorted(photos.glob("*.png"))[0]  # 128 x 128
    code, out, err = run(capsys, "caption", "--preset", small_preset, image, "--max-pixels", 1000)
    assert code == 2 and out == ""
    assert (
        "over the limit of 1000 (export.max_pixels); raise it with --max-pixels N, or send a "
        "smaller image" in err
    )
    code, out, _ = run(capsys, "caption", "--preset", small_preset, image, "--max-pixels", 16384)
    assert code == 0 and out.startswith(f"{image}: ")
