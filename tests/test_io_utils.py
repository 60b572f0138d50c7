"""Atomic writes: whole files or none, never through a planted link."""

import os
import threading

import pytest

from keras_saat.io_utils import atomic_path, write_text_atomic


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
