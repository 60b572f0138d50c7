"""The tutorial notebooks run top to bottom (small settings) and are stored without outputs."""

import json
from pathlib import Path

import pytest

from tests.helpers import TUTORIAL_FIGURES

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
    """Each notebook runs top to bottom; the executed copy is what the docs site shows
    (`tools/docs.py` reuses it while the notebook's source is unchanged)."""
    pytest.importorskip("nbclient")
    from tools.docs import execute_notebook, executed_copy, save_executed

    monkeypatch.setenv("KERAS_SAAT_FULL", "0")
    # Raises CellExecutionError with the failing cell and its traceback.
    notebook = execute_notebook(path, notebook_dir / "runs", timeout=600)
    save_executed(notebook, path.name)
    assert executed_copy(path) is not None
    images = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]
    if path.stem in TUTORIAL_FIGURES:  # the tutorial's figures are on its page
        assert len(images) >= TUTORIAL_FIGURES[path.stem], path.name
