"""Faults that lose nothing: a full disk, a read-only folder, a second writer, a SIGTERM.

A full disk is a small tmpfs and a read-only folder a read-only bind mount, each in a
mount namespace of the test's own (`unshare`), so nothing outside the test sees them.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from keras_saat.cli.caption_files import CaptionFile
from keras_saat.errors import FileWriteError, KerasSaatError
from tests.helpers import ROOT

CLI = [sys.executable, "-m", "keras_saat.cli"]


def namespaces_work():
    unshare = shutil.which("unshare")
    probe = "mount -t tmpfs -o size=4k tmpfs /mnt"
    return unshare and subprocess.run([unshare, "-rm", "sh", "-c", probe]).returncode == 0


needs_mounts = pytest.mark.skipif(
    not namespaces_work(), reason="no user and mount namespaces here (unshare -rm)"
)


def in_namespace(script, *args):
    """`sh -c script args...` as root of new user and mount namespaces."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    env["PYTHON"] = sys.executable
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *map(str, args)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip


def last_line(stderr):
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr[-3000:]
    return lines[-1] if lines else ""


def rows(path):
    """{image: caption} of a caption file's whole rows."""
    found = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last row: the next run captions that image again
        found[row["image"]] = row["caption"]
    return found


FULL_DISK = """
mount -t tmpfs -o size=4k tmpfs "$1" || exit 99
"$PYTHON" -m keras_saat.cli caption --preset "$2" "$3" --out "$1/captions.jsonl" --batch-size 4
echo "rc $?" >&2
ls -A "$1" >&2
cp "$1/captions.jsonl" "$4"
"""


@needs_mounts
@pytest.mark.slow
def test_caption_on_a_full_disk_names_the_file_and_a_rerun_finishes(
    small_preset, shapes_dir, tmp_path
):
    mount, kept = tmp_path / "disk", tmp_path / "kept.jsonl"
    mount.mkdir()
    images = shapes_dir / "images"
    done = in_namespace(FULL_DISK, mount, small_preset, images, kept)
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    error = (
        f"keras-saat: error: cannot write {mount}/captions.jsonl: the disk is full: free some space"
    )
    assert error in lines and "rc 2" in lines
    assert lines[-1] == "captions.jsonl"  # no temporaries beside it
    assert 0 < len(rows(kept)) < 56

    straight = tmp_path / "straight.jsonl"
    for out in (kept, straight):  # the rerun with room, and a run that was never stopped
        argv = [*CLI, "caption", "--preset", small_preset, images, "--out", out]
        assert subprocess.run(list(map(str, argv)), capture_output=True).returncode == 0
    assert rows(kept) == rows(straight) and len(rows(straight)) == 56


READ_ONLY = """
mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99
"$PYTHON" -m keras_saat.cli caption --preset "$2" "$3" --out "$1/captions.jsonl"
echo "rc $?" >&2
"""


@needs_mounts
@pytest.mark.slow
def test_caption_into_a_read_only_folder_says_so(small_preset, test_images, tmp_path):
    done = in_namespace(READ_ONLY, tmp_path, small_preset, test_images[0])
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[-2:] == [
        f"keras-saat: error: cannot write {tmp_path}/captions.jsonl: the file system is read-only",
        "rc 2",
    ]
    assert not (tmp_path / "captions.jsonl").exists()


ATOMIC_WRITE = """
mount -t tmpfs -o size=64k tmpfs "$1" || exit 99
"$PYTHON" -c '
import sys
from keras_saat.errors import FileWriteError
from keras_saat.io_utils import write_bytes_atomic
try:
    write_bytes_atomic(sys.argv[1] + "/model.keras", bytes(1 << 20))
except FileWriteError as err:
    print(err)
' "$1"
ls -A "$1"
"""


@needs_mounts
def test_a_whole_file_write_on_a_full_disk_leaves_nothing(tmp_path):
    done = in_namespace(ATOMIC_WRITE, tmp_path)
    assert done.stdout.splitlines() == [
        f"cannot write {tmp_path}/model.keras: the disk is full: free some space"
    ], done.stderr[-3000:]


EXPORT = """
mount -t tmpfs -o size=256k tmpfs "$1" || exit 99
"$PYTHON" -m keras_saat.cli export --preset "$2" --out "$1/models"
echo "rc $?" >&2
ls -A "$1/models" >&2
"""


@needs_mounts
@pytest.mark.slow
def test_export_on_a_full_disk_is_a_full_disk_not_out_of_memory(small_preset, tmp_path):
    done = in_namespace(EXPORT, tmp_path, small_preset)
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and "out of memory" not in done.stderr
    assert (
        f"keras-saat: error: cannot write {tmp_path}/models/1: the disk is full: free some space"
        in lines
    )
    assert lines[-1] == "rc 2"  # and nothing left in the model base


def test_a_second_caption_run_on_one_file_is_refused(tmp_path):
    path = tmp_path / "captions.jsonl"
    first = CaptionFile(path)
    with pytest.raises(KerasSaatError, match=r"being written by another keras-saat caption run"):
        CaptionFile(path)
    first.write({"image": "a.png", "caption": "", "log_prob": None, "error": "undecodable"})
    first.close()
    # A failed row makes the next run rewrite the file; the rewrite is locked before it
    # takes the name, so a third run cannot append to the file the second replaced.
    second = CaptionFile(path)
    with pytest.raises(KerasSaatError, match=r"being written by another"):
        CaptionFile(path)
    second.write({"image": "a.png", "caption": "a red circle", "log_prob": -1.0, "error": ""})
    second.close()
    assert CaptionFile(path).done == {"a.png"}


def test_a_refused_row_names_the_file(tmp_path):
    out = CaptionFile(tmp_path / "captions.jsonl")
    out._file.close()
    out._file = open("/dev/full", "w", buffering=1)  # every write: ENOSPC
    with pytest.raises(FileWriteError, match=r"cannot write .*captions.jsonl: the disk is full"):
        out.write({"image": "a.png", "caption": "a red circle", "log_prob": -1.0, "error": ""})


def test_sigterm_stops_a_command_as_ctrl_c_does(tmp_path):
    """`make-shapes` (no TensorFlow) stopped by SIGTERM mid-way: our one line, exit 143."""
    out = tmp_path / "world"
    process = subprocess.Popen(
        [*CLI, "make-shapes", "--out", str(out), "--train", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not any((out / "images").glob("*.png")) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    assert last_line(stderr) == "keras-saat: interrupted (SIGTERM)"


def test_export_sweeps_the_staging_folders_of_exports_that_are_gone(tmp_path):
    from keras_saat.export.staging import sweep_staging

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    dead, alive = int(gone.stdout), os.getppid()  # a finished process's pid; pytest's parent
    host = socket.gethostname()
    kept = [f".2.partial-{host}-{alive}", f".3.partial-elsewhere-{dead}", ".notes", "1"]
    for name in (f".1.partial-{host}-{dead}", *kept):
        (tmp_path / name).mkdir()
    logged = []
    assert sweep_staging(tmp_path, logged.append) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)  # another host's: kept
    assert logged == [f"removed 1 staging folder(s) of exports that were stopped in {tmp_path}"]


READ_ONLY_WORKDIR = """
mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99
"$PYTHON" -m keras_saat.cli caption --workdir "$1" "$2"
echo "caption rc $?" >&2
"$PYTHON" -m keras_saat.cli evaluate --workdir "$1" --split val --beam-size 1 --out "$3"
echo "evaluate rc $?" >&2
"$PYTHON" -m keras_saat.cli export --workdir "$1" --out "$4"
echo "export rc $?" >&2
"""


@needs_mounts
@pytest.mark.slow
def test_a_read_only_workdir_captions_scores_and_exports(trained_workdir, test_images, tmp_path):
    """Commands that only read a trained workdir work on a read-only one (a shared run)."""
    workdir = tmp_path / "run"
    shutil.copytree(trained_workdir, workdir)
    scores, models = tmp_path / "scores", tmp_path / "models"
    done = in_namespace(READ_ONLY_WORKDIR, workdir, test_images[0], scores, models)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for command in ("caption", "evaluate", "export"):
        assert f"{command} rc 0" in done.stderr.splitlines(), done.stderr[-3000:]
    assert json.loads((scores / "metrics.json").read_text())["bleu_4"] >= 0
    assert (models / "1" / "saved_model.pb").is_file()
