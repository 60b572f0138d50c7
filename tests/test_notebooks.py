"""The tutorial notebooks: committed with their outputs (as the site shows them), run top to
bottom, and what their executed pages show (captions, scores, attention maps, clean
outputs, no numbers the run does not produce) is checked."""

import json
import re
from pathlib import Path

import nbformat
import pytest

from tests.helpers import TUTORIAL_FIGURES, TUTORIALS
from tools.docs import (
    CELLS_STAMP,
    EXECUTED,
    EXECUTED_WITH,
    MIN_HAND_DRAWN,
    ROOT,
    STAMP,
    VOLATILE_CELL_METADATA,
    VOLATILE_METADATA,
    attention_peak,
    cells_digest,
    output_problems,
    output_texts,
    record_problems,
)

pytestmark = TUTORIALS

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))

# A cell that draws: the paper's Figure 2, a grid of captioned images, a plot.
DRAWS = re.compile(r"\bplot_attention\(|\bplot_captions\(|\bplt\.(?:subplots|imshow|figure)\(")


def code_cells(notebook):
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def images(cell):
    return [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]


def test_the_series_is_complete_and_teaches_the_library():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]
    for path in NOTEBOOKS:
        for cell in code_cells(json.loads(path.read_text())):
            # Notebooks teach the library; they never re-define its classes.
            assert "\nclass " not in f"\n{''.join(cell['source'])}", path.name
        assert "import keras_saat" in path.read_text() or "from keras_saat" in path.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_is_committed_with_the_outputs_of_its_cells(path):
    """The repository shows what the site shows: every code cell has an output (a cell
    that prints nothing ends with what it made), each cell that draws has its figure,
    and the outputs are those of these very cells (`make notebooks` writes them)."""
    notebook = json.loads(path.read_text())
    cells = code_cells(notebook)
    silent = [
        k for k, cell in enumerate(notebook["cells"]) if cell in cells and not cell["outputs"]
    ]
    assert silent == [], f"{path.name}: code cells {silent} have no output: run `make notebooks`"
    assert notebook["metadata"].get(CELLS_STAMP) == cells_digest(notebook), (
        f"{path.name}: its outputs are not of its cells as they are: run `make notebooks`"
    )
    assert notebook["metadata"].get(STAMP)
    assert [cell["execution_count"] for cell in cells] == list(range(1, len(cells) + 1))
    for cell in cells:
        if DRAWS.search("".join(cell["source"])):
            assert images(cell), f"{path.name}: a cell that draws shows no image"
    figures = sum(len(images(cell)) for cell in cells)
    assert figures >= TUTORIAL_FIGURES.get(path.stem, 0), path.name
    # Clean: what the page would fail on, and nothing that changes from run to run.
    assert output_problems(nbformat.from_dict(notebook), ROOT / "build" / "notebook-runs") == []
    assert not set(VOLATILE_METADATA) & set(notebook["metadata"]), path.name
    assert set(notebook["metadata"].get("language_info", {})) <= {"name"}, path.name
    assert set(notebook["metadata"].get(EXECUTED_WITH, {})) <= {"version"}, path.name
    for cell in notebook["cells"]:
        assert not set(VOLATILE_CELL_METADATA) & set(cell["metadata"]), path.name


def test_the_own_picture_cell_captions_a_picture_the_reader_names():
    """Notebook 4 ends with a cell whose path a reader edits: a picture that ships with
    keras_saat by default, its caption above it and each word's attention map."""
    notebook = nbformat.read(ROOT / "notebooks" / "04_decoding_evaluation.ipynb", as_version=4)
    cell = next(c for c in code_cells(notebook) if "MY_PICTURE = " in c.source)
    source = cell.source
    default = re.search(r"MY_PICTURE = HAND_DRAWN_DIR / \"([^\"]+)\"", source)
    assert default and (ROOT / "keras_saat" / "data" / "hand_drawn" / default[1]).is_file()
    assert "plot_attention(" in source and "suptitle(" in source
    assert len(images(cell)) == 1
    printed = "".join(o.get("text", "") for o in cell["outputs"])
    assert printed.startswith(f"{default[1]}: ") and len(printed.split(": ", 1)[1].split()) > 1


# ------------------------------------------------------------- the page checks themselves


def page(*outputs):
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    notebook.cells = [cell]
    return notebook


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def test_output_problems_name_stderr_errors_retracing_and_build_paths(tmp_path):
    runs = tmp_path / "runs"
    assert output_problems(page(stream("captions: a red circle\n")), runs) == []
    problems = output_problems(
        page(
            stream("I0000 cudart_stub.cc:31] Could not find cuda drivers\n", "stderr"),
            stream("WARNING:tensorflow:5 out of the last 7 calls triggered tf.function retracing"),
            stream(f"saved {runs.resolve()}/shapes_soft/model.keras\n"),
            stream(f"read {ROOT}/notebooks\n"),
            {"output_type": "error", "ename": "ValueError", "evalue": "", "traceback": []},
        ),
        runs,
    )
    # The tmp_path also matches "/tmp/"; a checkout under /tmp/ matches it once more.
    assert len(problems) == 6 + str(ROOT).startswith("/tmp/"), problems
    assert any("stderr" in p for p in problems) and any("ValueError" in p for p in problems)


def test_record_problems_fail_a_page_whose_model_has_not_learned():
    maps = [
        [[0.9 if (r, c) == (i, 3) else 0.1 / 63 for c in range(8)] for r in range(8)]
        for i in range(3)
    ]
    # Captioned as drawn: the same words once the opening ones and the sizes are left out.
    drawn = [
        {"caption": "a picture of a red circle above a large blue square", "drawn": "a red circle above a blue square"},
        {"caption": "there is a green triangle to the left of a small purple diamond", "drawn": "a green triangle to the left of a purple diamond"},
        {"caption": "a yellow square in the center", "drawn": "a yellow square in the center"},
        {"caption": "a white square above a yellow triangle", "drawn": "a white square above a yellow triangle"},
        {"caption": "an image of a blue circle to the left of a red triangle", "drawn": "a blue circle to the left of a red triangle"},
    ]  # fmt: skip
    wrong = ["a green triangle a purple diamond and a red circle", "a yellow square at the top",
             "a white square a white square", "a red circle to the left of a blue triangle",
             "a blue square above a red triangle"]  # fmt: skip
    short = [*drawn[: MIN_HAND_DRAWN - 1]] + [
        dict(d, caption=w) for d, w in zip(drawn[MIN_HAND_DRAWN - 1 :], wrong, strict=False)
    ]
    good = {"bleu_4": 0.96, "captions": ["a red circle", "a blue square"], "attention": maps,
            "hand_drawn": [*drawn[:MIN_HAND_DRAWN], *short[MIN_HAND_DRAWN:]]}  # fmt: skip
    assert record_problems("04_decoding_evaluation", good) == []
    problems = record_problems("04_decoding_evaluation", dict(good, hand_drawn=short))
    assert problems[0].startswith(f"{MIN_HAND_DRAWN - 1} of its hand-drawn")
    assert record_problems("01_encoder", None) == []  # shows no model
    assert "records nothing" in record_problems("04_decoding_evaluation", None)[0]
    flat = [[[1 / 64] * 8] * 8] * 3
    nothing = [dict(d, caption="a picture of a large purple square") for d in drawn]
    bad = {"bleu_4": 0.0, "captions": ["a of a a square a a"] * 6, "attention": flat,
           "hand_drawn": nothing}  # fmt: skip
    problems = record_problems("04_decoding_evaluation", bad)
    assert [p.split()[0] for p in problems] == ["test", "its", "0", "its"], problems
    assert attention_peak(flat) == pytest.approx(1.0)
    assert attention_peak(maps) == pytest.approx(0.9 * 64)
    assert "no 'captions'" in record_problems("03_training_fit", {})[0]


# ----------------------------------------------------- numbers in the tutorials' prose

# Numbers the prose may state without the run printing them: equation, section, figure,
# notebook and step numbers, citations' years, and a setting named with its key.
CITED = re.compile(
    r"(?:Eqs?\.|Sec\.|Sections?|Figure|Fig\.|Table|notebooks?|et al\.,?)"
    r"(?:\s*\d+(?:\.\d+)*\s*(?:and|to|,))?\s*$"
)


def prose_numbers(markdown):
    """(number, the text before it) for each number in markdown prose: not in code, math,
    headings' or list items' numbering."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", " ", text, flags=re.S)
    text = re.sub(r"^\s*(?:#+\s*)?\d+\.\s", " ", text, flags=re.M)
    for match in re.finditer(r"(?<![\w.])(?<![A-Za-z]-)\d+(?:[.,]\d+)*(?![\w])", text):
        yield match.group().rstrip(".,"), text[max(0, match.start() - 20) : match.start()]


def unproduced_numbers(markdown, shown):
    """The prose's numbers that are neither cited (CITED, a year) nor in `shown`, the
    executed notebook's output text."""
    produced = set(re.findall(r"\d+(?:[.,]\d+)*", shown))
    return [
        number
        for number, before in prose_numbers(markdown)
        if number not in produced
        and not CITED.search(before)
        and not re.fullmatch(r"(19|20)\d\d", number)
    ]


def test_the_prose_number_scan_finds_claims_and_passes_citations():
    prose = (
        "Test BLEU-4 is 96.5-97.2 and 98.8% of words hit (chance 11%), in about 5 minutes.\n"
        "## 2. Eq. 4 and Sec. 3.1.2 of Xu et al., 2015; notebook 6; $L = 196$; `beam 3`.\n"
        "1. a step\n"
    )
    assert unproduced_numbers(prose, "") == ["96.5", "97.2", "98.8", "11", "5"]
    assert unproduced_numbers(prose, "BLEU-4 96.5 97.2 98.8% chance 11.0% 5") == ["11"]


# ------------------------------------------------------------------ the executed series


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tutorial_runs, monkeypatch, as_a_reader):
    """Each notebook runs top to bottom; the executed copy is what the docs site shows
    (`tools/docs.py` reuses it while the notebook's source is unchanged). Executing it
    raises TutorialError when its page shows a model that has not learned, stderr or
    build paths (`page_problems`). Its kernel compiles XLA as a reader's does
    (`as_a_reader`: without the suite's -O0), so the page's step times are a reader's."""
    pytest.importorskip("nbclient")
    from tools.docs import execute_notebook, executed_copy, save_executed

    monkeypatch.setenv("KERAS_SAAT_FULL", "0")
    # Raises CellExecutionError with the failing cell and its traceback.
    notebook = execute_notebook(path, tutorial_runs, timeout=600)
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
    # Each code cell shows something, as the committed notebook must.
    silent = [
        k for k, cell in enumerate(notebook.cells) if cell.cell_type == "code" and not cell.outputs
    ]
    assert silent == [], f"{path.name}: code cells {silent} show nothing"

    # What the reader sees: no stderr box, no build path, no number the run did not print.
    assert output_problems(notebook, tutorial_runs) == []
    texts = [text for _, output, text in output_texts(notebook)]
    assert not any(output.get("name") == "stderr" for _, output, _ in output_texts(notebook))
    assert not any("/tmp/" in t or str(ROOT) in t for t in texts)
    shown = "\n".join(texts)
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert unproduced_numbers(markdown, shown) == [], path.name
    assert (EXECUTED / path.name).is_file()
