"""`keras-saat caption --runner`: rows as `caption --out` writes them, in shards a rerun skips."""

import json
import os
import shutil

import pytest

pytest.importorskip("apache_beam")

from keras_saat.cli import main  # noqa: E402


def shard_rows(out):
    """{image: row} over every shard file in `out`."""
    rows = {}
    for shard in sorted(out.glob("captions-*.jsonl")):
        for line in shard.read_text().splitlines():
            row = json.loads(line)
            rows[row["image"]] = row
    return rows


def runner_argv(base, images, out, *extra):
    return ["caption", "--saved-model", str(base), *map(str, images), "--out", str(out),
            "--runner", "local", "--shard-size", "2", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def runner_out(export_base, test_images, tmp_path_factory):
    """The shard folder of one `caption --runner local` run over `test_images` (read-only:
    a test that changes it works on a copy)."""
    out = tmp_path_factory.mktemp("runner") / "captions"
    assert main(runner_argv(export_base, test_images, out)) == 0
    return out


@pytest.mark.slow
def test_rows_equal_caption_out_and_a_rerun_redoes_only_missing_shards(
    runner_out, export_base, trained_workdir, test_images, tmp_path, capsys
):
    single = tmp_path / "single.jsonl"
    argv = ["caption", "--workdir", str(trained_workdir), *map(str, test_images)]
    assert main([*argv, "--out", str(single)]) == 0
    expected = {
        json.loads(line)["image"]: json.loads(line) for line in single.read_text().splitlines()
    }

    out = tmp_path / "captions"
    shutil.copytree(runner_out, out)
    shards = sorted(out.glob("captions-*.jsonl"))
    assert len(shards) == 2  # 3 images, 2 a shard
    rows = shard_rows(out)
    assert sorted(rows) == sorted(expected)
    for image, row in rows.items():
        assert (row["caption"], row["error"]) == (expected[image]["caption"], "")
        assert row["log_prob"] == pytest.approx(expected[image]["log_prob"], abs=1e-3)
        assert row["familiar"] == expected[image]["familiar"]
        assert row["novelty"] == pytest.approx(expected[image]["novelty"], abs=1e-3)

    kept, redone = shards
    kept_stamp, redone_text = os.stat(kept).st_mtime_ns, redone.read_text()
    redone.unlink()
    capsys.readouterr()
    assert main(runner_argv(export_base, test_images, out)) == 0
    assert "1 of 2 shards already written, skipping them" in capsys.readouterr().out
    assert os.stat(kept).st_mtime_ns == kept_stamp
    again, before = (
        [json.loads(line) for line in text.splitlines()]
        for text in (redone.read_text(), redone_text)
    )
    assert [r["image"] for r in again] == [r["image"] for r in before]
    for row, first in zip(again, before, strict=True):  # batched alone now: the last digit
        assert {**row, "log_prob": None, "novelty": None} == {
            **first,
            "log_prob": None,
            "novelty": None,
        }
        assert row["log_prob"] == pytest.approx(first["log_prob"], abs=1e-4)


@pytest.mark.slow
def test_two_worker_processes_write_the_same_rows(runner_out, export_base, test_images, tmp_path):
    one, two = runner_out, tmp_path / "two"
    processes = ["--", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    assert main(runner_argv(export_base, test_images, two, *processes)) == 0
    rows, expected = shard_rows(two), shard_rows(one)
    assert sorted(rows) == sorted(expected)
    for image, row in rows.items():  # batches split differently: the last digit may differ
        assert (row["caption"], row["error"]) == (expected[image]["caption"], "")
        assert row["log_prob"] == pytest.approx(expected[image]["log_prob"], abs=1e-4)


def test_an_unreadable_image_is_an_error_row_and_exit_status_2(
    small_export, test_images, tmp_path, capsys
):
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff garbage")
    out = tmp_path / "captions"
    assert main(runner_argv(small_export, [corrupt, *test_images], out)) == 2
    rows = shard_rows(out)
    assert rows[str(corrupt)]["caption"] is None and rows[str(corrupt)]["error"]
    assert all(rows[str(p)]["error"] == "" for p in test_images)
    assert "1 of 4 images could not be captioned" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runner", "mars"], "--runner mars: not a Beam runner here; give one of local,"),
        (["--runner", "local", "--attention"], "--attention is not available with --runner"),
        (["--runner", "local", "--beam-size", "2"], "--beam-size is not available with --runner"),
    ],
)
def test_runner_mistakes_are_one_line(small_export, test_images, tmp_path, capsys, extra, message):
    argv = ["caption", "--saved-model", str(small_export), str(test_images[0])]
    assert main([*argv, "--out", str(tmp_path / "o"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_runner_needs_a_saved_model_and_a_saved_model_a_runner(
    small_preset, small_export, test_images, tmp_path, capsys
):
    argv = ["caption", "--workdir", str(small_preset), str(test_images[0])]
    assert main([*argv, "--out", str(tmp_path / "o"), "--runner", "local"]) == 2
    assert "give --saved-model BASE" in capsys.readouterr().err
    argv = ["caption", "--saved-model", str(small_export), str(test_images[0])]
    assert main(argv) == 2
    assert "--saved-model runs in a Beam pipeline: add --runner local" in capsys.readouterr().err


def test_a_missing_saved_model_is_one_line(test_images, tmp_path, capsys):
    argv = ["caption", "--saved-model", str(tmp_path / "nothing"), str(test_images[0])]
    assert main([*argv, "--out", str(tmp_path / "o"), "--runner", "local"]) == 2
    assert "no saved_model.pb there nor in a version folder below it" in capsys.readouterr().err


def test_a_location_without_its_beam_file_system_is_one_line(small_export, tmp_path, capsys):
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem("gs://bucket/photos")
        pytest.skip("apache-beam[gcp] is installed here")
    except ValueError:
        pass
    argv = ["caption", "--saved-model", str(small_export), "gs://bucket/photos/*.jpg"]
    assert main([*argv, "--out", str(tmp_path / "o"), "--runner", "dataflow"]) == 2
    assert capsys.readouterr().err.strip() == (
        "keras-saat: error: gs://bucket/photos/*.jpg: Beam has no file system for gs:// here; "
        'pip install "apache-beam[gcp]"'
    )


def test_hostile_names_and_a_hostile_out_folder_keep_every_row_where_it_belongs(
    small_export, test_images, tmp_path, capsys, monkeypatch
):
    """A newline and a non-UTF-8 byte in file names, brackets in --out, a shard list planted
    in --out, a folder named like a shard, and an image removed between runs."""
    photos = tmp_path / "photos"
    photos.mkdir()
    newline = photos / "evil\nb.png"
    shutil.copy(test_images[0], newline)
    shutil.copy(test_images[1], photos / "a.png")
    os.close(os.open(os.fsencode(photos) + b"/\xff.png", os.O_CREAT | os.O_WRONLY))
    monkeypatch.chdir(tmp_path)  # the launcher's folder holds a b.png outside the photos
    shutil.copy(test_images[2], tmp_path / "b.png")
    out = tmp_path / "captions [v1]"
    argv = ["caption", "--saved-model", str(small_export), str(photos), "--out", str(out),
            "--runner", "local", "--shard-size", "2"]  # fmt: skip
    assert main(argv) == 2  # the non-UTF-8 name is an error row
    rows = shard_rows(out)
    bad = os.fsencode(photos).decode("utf-8", "backslashreplace") + "/\\xff.png"
    assert sorted(rows) == sorted([str(photos / "a.png"), str(newline), bad])
    assert rows[str(newline)]["error"] == "" and rows[str(newline)]["caption"] is not None
    assert rows[bad]["error"] == "the file name is not valid UTF-8; rename the file"

    # A rerun over "captions [v1]" skips its shards; a planted list is never read.
    for planted in (out / ".lists").iterdir():
        planted.write_text(json.dumps(str(tmp_path / "b.png")) + "\n")
    redo = sorted(out.glob("captions-*.jsonl"))[0]  # a.png and the newline's shard
    redo.unlink()
    capsys.readouterr()
    assert main(argv) == 0
    assert "1 of 2 shards already written" in capsys.readouterr().out
    assert sorted(shard_rows(out)) == sorted(rows)

    # An image removed: its shard's file goes, the new shards' rows stand alone.
    newline.unlink()
    assert main(argv) == 2
    assert "removing" in capsys.readouterr().out
    assert sorted(shard_rows(out)) == sorted([str(photos / "a.png"), bad])

    # A file of the user's own in --out is never a stale shard.
    (out / "captions-final.jsonl").write_text("mine\n")
    assert main(argv) == 0  # every shard written before: nothing captioned, nothing failed
    assert (out / "captions-final.jsonl").read_text() == "mine\n"

    # A folder under a shard's name: one line.
    (out / "captions-00009-000000000000.jsonl").mkdir()
    assert main(argv) == 2
    assert "captions-00009-000000000000.jsonl is not a file; remove it" in capsys.readouterr().err


@pytest.mark.slow
def test_a_rerun_sweeps_a_killed_runs_temporaries(
    runner_out, export_base, test_images, tmp_path, capsys
):
    """A run killed while it wrote a shard and its list leaves their temporaries; the
    next run into the folder removes them (a running writer's stay) and says so."""
    import secrets
    import socket

    from tests.helpers import killed_write

    out = tmp_path / "captions"
    shutil.copytree(runner_out, out)
    redone = sorted(out.glob("captions-*.jsonl"))[1]
    expected = redone.read_text()
    redone.unlink()
    killed_write(redone)
    killed_write(out / ".lists" / (redone.stem + ".txt"))
    running = out / f".other.jsonl.{socket.gethostname()}-{os.getpid()}.{secrets.token_hex(6)}.tmp"
    running.write_bytes(b"")
    capsys.readouterr()
    assert main(runner_argv(export_base, test_images, out)) == 0
    logged = capsys.readouterr().out
    for folder in (out, out / ".lists"):
        assert f"removed 1 temporary file(s) of writers that were stopped in {folder}" in logged
    assert sorted(p.name for p in out.rglob(".*tmp*")) == [running.name]
    again = [json.loads(line)["image"] for line in redone.read_text().splitlines()]
    assert again == [json.loads(line)["image"] for line in expected.splitlines()]
