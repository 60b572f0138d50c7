"""Atomic writes: whole files or none, never through a planted link."""

import os
import threading
import time

import pytest

from keras_saat.io_utils import atomic_path, whole_number, write_text_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


def test_the_temporary_ends_with_the_suffix_a_writer_needs(tmp_path):
    with atomic_path(tmp_path / "model.keras", suffix=".keras") as tmp:
        assert tmp.name.endswith(".keras") and tmp.parent == tmp_path
        tmp.write_bytes(b"x")
    assert (tmp_path / "model.keras").read_bytes() == b"x"


def test_concurrent_writers_never_share_a_temporary(tmp_path):
    path = tmp_path / "shared.txt"
    texts = [f"writer {i}\n" * 2000 for i in range(8)]
    threads = [threading.Thread(target=write_text_atomic, args=(path, t)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert path.read_text() in texts and os.listdir(tmp_path) == ["shared.txt"]


def test_temporaries_of_killed_writers_are_removed_and_nothing_else(tmp_path):
    from keras_saat.io_utils import remove_temporaries

    (tmp_path / "shard.tfrecord").write_bytes(b"kept")
    (tmp_path / ".shard.tfrecord.0123456789ab.tmp").write_bytes(b"left by a kill")
    (tmp_path / ".model.keras.0123456789ab.tmp.keras").write_bytes(b"left by a kill")
    (tmp_path / ".hidden.tmp").write_bytes(b"not ours")
    assert remove_temporaries(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden.tmp", "shard.tfrecord"]


def test_sweep_removes_the_temporaries_of_writers_that_are_gone(tmp_path):
    """A killed writer's (this machine, its process gone) at once; another machine's, or
    a name without a process, once a day old; a running writer's and other files never."""
    import secrets
    import socket

    from keras_saat.io_utils import STALE_AFTER_S, sweep_temporaries
    from tests.helpers import killed_write

    killed = killed_write(tmp_path / "captions-00000-0123456789ab.jsonl")
    host = socket.gethostname()
    running = f".a.jsonl.{host}-{os.getpid()}.{secrets.token_hex(6)}.tmp"
    elsewhere = f".b.jsonl.far-away-{os.getpid()}.{secrets.token_hex(6)}.tmp"
    old = time.time() - STALE_AFTER_S - 60
    for name in (running, elsewhere, "train-00000.tfrecord.tmp-4242", "notes.tmp", "x.json"):
        (tmp_path / name).write_bytes(b"")
    for name in ("old.tfrecord.tmp-4242", ".old.npz.0123456789ab.tmp.npz", "old-notes.tmp"):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (old, old))
    logged = []
    assert sweep_temporaries(tmp_path, logged.append) == 3
    assert killed.name.startswith(f".captions-00000-0123456789ab.jsonl.{host}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [running, elsewhere, "train-00000.tfrecord.tmp-4242", "notes.tmp", "x.json",
         "old-notes.tmp"]
    )  # fmt: skip
    assert logged == [f"removed 3 temporary file(s) of writers that were stopped in {tmp_path}"]


def test_version_folders_are_named_by_ascii_digits_alone(tmp_path):
    """TF Serving reads "1" and "10" as versions; "²" and "٣٣" pass str.isdigit(), and int()
    refuses the first and reads the second as 33; 20 nines are past int64: all three are
    other folders here."""
    from keras_saat.export.saved_model import next_version
    from keras_saat.serving.dev_server import latest_version

    for name in ("1", "10", "²", "٣٣", "9" * 20, "tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_bytes(b"")
    assert [whole_number(t) for t in ("10", "007", "²", "٣٣", "", "-1", "9" * 19)] == [
        10, 7, None, None, None, None, None,
    ]  # fmt: skip
    assert next_version(tmp_path) == 11
    assert latest_version(tmp_path) == 10
