"""The tutorial notebooks run top to bottom (small settings) and are stored without outputs."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def test_the_series_is_complete_and_stored_clean():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]
    for path in NOTEBOOKS:
        notebook = json.loads(path.read_text())
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            assert cell["outputs"] == [] and cell["execution_count"] is None, path.name
            source = "".join(cell["source"])
            # Notebooks teach the library; they never re-define its classes.
            assert "\nclass " not in f"\n{source}", path.name
        assert "import keras_saat" in path.read_text() or "from keras_saat" in path.read_text()


@pytest.fixture(scope="module")
def notebook_dir(tmp_path_factory):
    """One working folder for the series, so notebook 6 reuses notebook 4's model."""
    return tmp_path_factory.mktemp("notebooks")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, notebook_dir, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    monkeypatch.setenv("KERAS_SAAT_FULL", "0")
    monkeypatch.setenv("KERAS_SAAT_NOTEBOOKS", str(notebook_dir / "runs"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(str(path), as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook_dir)}},
    )
    client.execute()  # raises CellExecutionError with the failing cell and its traceback
