"""find_images: folders, globs and links, each real file once, loops never followed twice."""

import os

import pytest

from keras_saat.errors import KerasSaatError
from keras_saat.images.image_files import encoded_images, find_images


@pytest.fixture
def tree(tmp_path):
    """a.png, sub/b.png, sub/deep/c.jpg, notes.txt; a link to sub; a link loop in sub/deep."""
    root = tmp_path / "photos"
    (root / "sub" / "deep").mkdir(parents=True)
    for name in ("a.png", "sub/b.png", "sub/deep/c.jpg", "notes.txt"):
        (root / name).write_bytes(b"x")
    (root / "sub" / "deep" / "loop").symlink_to(root)  # photos/sub/deep/loop -> photos
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "d.gif").write_bytes(b"x")
    (root / "linked").symlink_to(tmp_path / "outside")  # a symlinked folder, followed
    return root


def names(paths):
    return sorted(p.name for p in paths)


def test_a_folder_follows_links_and_loops_only_once(tree):
    assert names(find_images([tree])) == ["a.png", "b.png", "c.jpg", "d.gif"]


def test_recursive_globs_stop_at_loops(tree):
    assert names(find_images([f"{tree}/**/*.png"])) == ["a.png", "b.png"]
    assert names(find_images([f"{tree}/**"])) == ["a.png", "b.png", "c.jpg", "d.gif"]
    assert names(find_images([f"{tree}/*.png", f"{tree}/s?b/[ab].png"])) == ["a.png", "b.png"]


def test_the_same_file_by_two_names_comes_once(tree):
    (tree / "again.png").symlink_to(tree / "a.png")
    found = find_images([tree / "a.png", tree])
    assert names(found) == ["a.png", "b.png", "c.jpg", "d.gif"]


def test_relative_patterns_stay_relative(tree, monkeypatch):
    monkeypatch.chdir(tree)
    assert [str(p) for p in find_images(["*.png"])] == ["a.png"]
    with pytest.raises(KerasSaatError, match="holds no image files"):
        find_images(["*.bmp"])


def test_a_name_that_is_not_utf8_is_a_row_error(tree):
    bad = os.path.join(os.fsencode(tree), b"caf\xe9.png")
    with open(bad, "wb") as f:
        f.write(b"x")
    rows = {name: error for name, _, error in encoded_images(find_images([tree]))}
    assert rows[f"{tree}/caf\\xe9.png"] == "the file name is not valid UTF-8; rename the file"
    assert rows[f"{tree}/a.png"] == ""


def test_batches_hold_at_most_their_count_and_bytes_and_a_larger_item_goes_alone():
    from keras_saat.images.image_files import batches_by_bytes

    items = [b"a" * 4, b"b" * 5, b"c" * 20, b"d" * 1, b"e" * 9, b"f", b"g"]
    runs = [[i[0:1] for i in run] for run in batches_by_bytes(items, 3, limit=10)]
    assert runs == [[b"a", b"b"], [b"c"], [b"d", b"e"], [b"f", b"g"]]
    assert [len(r) for r in batches_by_bytes([b"x"] * 7, 3, limit=100)] == [3, 3, 1]
    assert [len(r) for r in batches_by_bytes([b"x"] * 7, None, limit=3)] == [3, 3, 1]


def test_a_hard_link_is_a_name_of_its_own_and_a_symbolic_link_is_not(tmp_path):
    import os

    from keras_saat.images.image_files import find_images

    (tmp_path / "a.png").write_bytes(b"\x89PNG")
    os.link(tmp_path / "a.png", tmp_path / "b.png")
    (tmp_path / "c.png").symlink_to(tmp_path / "a.png")
    assert [p.name for p in find_images([tmp_path])] == ["a.png", "b.png"]


def test_a_file_is_read_into_memory_once(tmp_path):
    """A 40 MB file costs its bytes once (one read of its size, no chunks joined)."""
    import tracemalloc

    from keras_saat.images.image_files import read_image_file

    path = tmp_path / "large.gif"
    path.write_bytes(b"GIF89a" + b"\x01" * (40 << 20))
    tracemalloc.start()
    try:
        data = read_image_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) == (40 << 20) + 6
    assert peak < 1.1 * len(data)
