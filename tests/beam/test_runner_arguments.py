"""--runner's pieces that need no model: shards, the SavedModel folder, runner names."""

import pytest

from keras_saat.errors import KerasSaatError

pytest.importorskip("apache_beam")

from keras_saat.beam import pipeline_runs  # noqa: E402


def test_a_shards_name_hashes_its_paths_so_new_images_rename_only_later_shards():
    paths = [f"photos/{i:03d}.png" for i in range(5)]
    before = pipeline_runs.shards(paths, 2)
    after = pipeline_runs.shards([*paths, "photos/005.png"], 2)
    assert [len(chunk) for _, chunk in before] == [2, 2, 1]
    assert [name for name, _ in before[:2]] == [name for name, _ in after[:2]]
    assert before[2][0] != after[2][0]
    assert before[0][0].startswith("captions-00000-") and before[2][0].startswith("captions-00002-")


def test_the_saved_model_is_the_highest_numeric_version(tmp_path):
    for version in ("1", "10", "9", "tmp", "²"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "saved_model.pb").write_bytes(b"")
    assert pipeline_runs.saved_model_folder(tmp_path) == str(tmp_path / "10")
    assert pipeline_runs.saved_model_folder(tmp_path / "9") == str(tmp_path / "9")
    with pytest.raises(KerasSaatError, match="no saved_model.pb there nor in a version folder"):
        pipeline_runs.saved_model_folder(tmp_path / "tmp" / "nothing")


@pytest.mark.parametrize(
    ("name", "runner"),
    [("local", "local"), ("DataflowRunner", "dataflow"), ("Flink", "flink"), ("spark", "spark")],
)
def test_runner_names_accept_beams_spelling(name, runner):
    assert pipeline_runs.runner_name(name) == runner
