"""`tools/docs.py` and `tools/docs_checks.py` without a build: the stamp that decides which
notebooks (and the demo's model) are run again, the record rules, the headings a
notebook page is published with, and the checks that fail a build (phrases that point
at nothing, in-page links with no target, files named that are not there). Nothing
here trains or executes."""

import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from tools import docs, docs_checks


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A stand-in for keras_saat/ (code, a recipe, package data, a compiled file) and
    for build/executed/."""
    root = tmp_path / "keras_saat"
    for name, data in {
        "data/shapes.py": b"COLOURS = 6\n",
        "recipes/shapes_soft.yaml": b"train:\n  epochs: 20\n",
        "data/hand_drawn/scene.jpg": b"\xff\xd8\xff\xe0",
        "data/__pycache__/shapes.cpython-311.pyc": b"\x00",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    monkeypatch.setattr(docs, "LIBRARY", root)
    monkeypatch.setattr(docs, "EXECUTED", tmp_path / "executed")
    return root


def stamped_copy(path):
    """Saves `path` as its executed copy, stamped as `execute_notebook` stamps it."""
    notebook = nbformat.read(str(path), as_version=4)
    notebook.metadata[docs.STAMP] = docs.source_hash(path)
    docs.save_executed(notebook, path.name)


@pytest.mark.parametrize(
    "changed",
    ["data/shapes.py", "recipes/shapes_soft.yaml", "data/hand_drawn/scene.jpg", "new.py"],
)
def test_a_library_change_makes_the_executed_notebook_stale(library, tmp_path, changed):
    notebook = tmp_path / "03_training_fit.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), notebook)
    stamped_copy(notebook)
    assert docs.executed_copy(notebook) == docs.EXECUTED / notebook.name
    # Compiled files are not the library: a run that writes them changes nothing.
    (library / "data" / "__pycache__" / "shapes.cpython-311.pyc").write_bytes(b"\x01")
    (library / "recipes" / "__pycache__").mkdir()
    (library / "recipes" / "__pycache__" / "x.pyc").write_bytes(b"\x02")
    assert docs.executed_copy(notebook) is not None
    with (library / changed).open("ab") as file:
        file.write(b"\n")
    assert docs.executed_copy(notebook) is None
    stamped_copy(notebook)  # executed again: reused until the next change
    assert docs.executed_copy(notebook) is not None
    notebook.write_text(notebook.read_text().replace('"1"', '"2"'))
    assert docs.executed_copy(notebook) is None


def executed(notebook, stamp, **metadata):
    """`notebook` as `execute_notebook` returns it: outputs, execution counts and times,
    the kernel's language_info, its stamp and `executed_with`."""
    import copy

    ran = copy.deepcopy(notebook)
    for count, cell in enumerate((c for c in ran.cells if c.cell_type == "code"), 1):
        cell.execution_count = count
        cell.metadata["execution"] = {"iopub.execute_input": "2026-11-28T17:00:00.000Z"}
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=f"cell {count}\n"),
            nbformat.v4.new_output("stream", name="stdout", text="flushed later\n"),
        ]
    ran.metadata.update(
        language_info={"name": "python", "version": "3.11.2", "mimetype": "text/x-python"},
        widgets={"application/vnd.jupyter.widget-state+json": {}},
        **{docs.STAMP: stamp, docs.EXECUTED_WITH: docs.executed_with()},
        **metadata,
    )
    return ran


def test_the_stamp_ignores_outputs_so_a_committed_notebook_is_its_own_executed_copy(
    library, tmp_path
):
    path = tmp_path / "notebooks" / "04_decoding_evaluation.ipynb"
    path.parent.mkdir()
    cells = [nbformat.v4.new_markdown_cell("# 4."), nbformat.v4.new_code_cell("x = 1")]
    cells.append(nbformat.v4.new_code_cell("record()", metadata={"tags": [docs.RECORD_TAG]}))
    notebook = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(notebook, path)
    stamp = docs.source_hash(path)
    assert docs.executed_copy(path) is None  # never executed

    nbformat.write(docs.committed(executed(notebook, stamp), notebook), path)
    assert docs.source_hash(path) == stamp  # outputs, counts and metadata are no part of it
    assert docs.executed_copy(path) == path  # nothing in build/executed: the committed copy
    stamped_copy(path)
    assert docs.executed_copy(path) == docs.EXECUTED / path.name  # the build's own comes first
    (docs.EXECUTED / path.name).unlink()
    (library / "data" / "shapes.py").write_text("COLOURS = 7\n")
    assert docs.executed_copy(path) is None  # the library changed: executed again
    nbformat.write(notebook, path)  # back as it was, and a cell's tag changes the stamp
    notebook.cells[2].metadata["tags"] = []
    assert docs.cells_digest(notebook) != docs.cells_digest(nbformat.read(path, as_version=4))


def test_a_committed_notebook_keeps_outputs_and_nothing_that_changes_from_run_to_run():
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# 1."), nbformat.v4.new_code_cell("print(1)")],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "language_info": {"name": "python", "version": "3.12.1"},  # saved from Jupyter
        },
    )
    notebook.cells[1].metadata["collapsed"] = True
    ran = executed(notebook, "abc")
    kept = docs.committed(ran, notebook)
    cell = kept.cells[1]
    assert cell.outputs == [
        nbformat.v4.new_output("stream", name="stdout", text="cell 1\nflushed later\n")
    ]
    assert cell.execution_count == 1 and cell.metadata == {} and cell.id == notebook.cells[1].id
    assert kept.metadata == {
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
        "language_info": {"name": "python"},
        docs.STAMP: "abc",
        docs.CELLS_STAMP: docs.cells_digest(notebook),
        docs.EXECUTED_WITH: {"version": ran.metadata[docs.EXECUTED_WITH]["version"]},
    }
    assert notebook.cells[1].outputs == [] and "execution" in ran.cells[1].metadata  # unchanged
    # Executed twice, committed alike: the file does not change.
    assert nbformat.writes(docs.committed(executed(notebook, "abc"), notebook)) == nbformat.writes(
        kept
    )
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(2)")])
    with pytest.raises(docs.TutorialError, match="not executed from this notebook"):
        docs.committed(ran, other)


def test_only_the_notebooks_command_writes_into_notebooks(library, tmp_path, monkeypatch):
    """`tools/docs.py notebooks` writes the executed copies back, executing the stale ones;
    the build (and so the suite, which builds the site) reads notebooks/ and writes into
    build/ and docs/tutorials/ only."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("01_encoder", "02_attention_decoder"):
        cells = [nbformat.v4.new_markdown_cell(f"# {name}"), nbformat.v4.new_code_cell("1")]
        nbformat.write(nbformat.v4.new_notebook(cells=cells), notebooks / f"{name}.ipynb")
    ran = []

    def execute(path, runs):
        ran.append(Path(path).name)
        return executed(nbformat.read(str(path), as_version=4), docs.source_hash(path))

    monkeypatch.setattr(docs, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    monkeypatch.setattr(docs, "TUTORIALS", tmp_path / "docs" / "tutorials")
    monkeypatch.setattr(docs, "execute_notebook", execute)
    before = {p.name: p.read_bytes() for p in notebooks.iterdir()}
    docs.prepare_tutorials(log=lambda *a: None)
    assert {p.name: p.read_bytes() for p in notebooks.iterdir()} == before
    assert len(ran) == 2 and len(list((tmp_path / "docs" / "tutorials").glob("*.ipynb"))) == 2

    written = docs.write_notebooks(log=lambda *a: None)
    assert [p.name for p in written] == sorted(before) and len(ran) == 2  # reused
    for path in written:
        notebook = nbformat.read(str(path), as_version=4)
        assert notebook.cells[1].outputs and notebook.metadata[docs.STAMP]
        assert docs.executed_copy(path) is not None
    shutil.rmtree(docs.EXECUTED)  # a fresh clone: the committed notebooks are current
    assert docs.write_notebooks(log=lambda *a: None) == [] and len(ran) == 2
    docs.prepare_tutorials(log=lambda *a: None)
    assert len(ran) == 2


def test_figures_are_compacted_to_a_palette_that_looks_the_same(tmp_path):
    """A figure of noisy scenes (the Shapes world's sensor noise) shrinks to a fraction,
    with the same size and colours to the eye; a PNG with transparency stays as it is."""
    import base64
    import io

    import numpy as np
    from matplotlib.figure import Figure
    from PIL import Image

    rng = np.random.default_rng(0)
    figure = Figure(figsize=(6, 3))
    for k, ax in enumerate(figure.subplots(1, 2)):
        scene = np.clip(rng.normal(40, 8, (128, 128, 3)), 0, 255).astype(np.uint8)
        scene[30:70, 40:90] = (220, 40, 40) if k else (230, 210, 60)
        ax.imshow(scene)
        ax.set_title(f"scene {k}")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    png = buffer.getvalue()
    compact = docs.compact_png(png)
    assert len(compact) < len(png) / 2
    before, after = (Image.open(io.BytesIO(b)).convert("RGB") for b in (png, compact))
    assert before.size == after.size and len(after.getcolors(1 << 16)) <= docs.FIGURE_COLOURS
    difference = np.abs(np.asarray(before, float) - np.asarray(after, float))
    assert difference.mean() < 4  # dithered: each colour kept on average, no banding
    assert docs.compact_png(compact) == compact  # no smaller a second time

    clear = io.BytesIO()
    Image.new("RGBA", (32, 32), (255, 0, 0, 0)).save(clear, "PNG")
    assert docs.compact_png(clear.getvalue()) == clear.getvalue()

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("plot()")])
    notebook.cells[0].outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(png).decode()})
    ]
    shrunk = docs.compact_figures(notebook)
    assert shrunk[0] > 2 * shrunk[1]
    assert base64.b64decode(notebook.cells[0].outputs[0].data["image/png"]) == compact


def test_tutorial_pages_carry_no_empty_script_address(tmp_path):
    """mkdocs-jupyter's MathJax loader is a <script src=""> (its custom_mathjax_url is
    empty): the hook takes it out; KaTeX renders the maths."""
    convert = pytest.importorskip("mkdocs_jupyter.convert")
    path = tmp_path / "02.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# 2.\n\n$e_{ti}$"), nbformat.v4.new_code_cell("1")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    page = convert.nb2html(str(path), custom_mathjax_url="")
    assert '<script src="">' in page  # what mkdocs-jupyter writes
    shown = docs.on_page_content(page, page=None, config={}, files=[])
    assert 'src=""' not in shown and "mathjax" not in shown.lower()
    assert "$e_{ti}$" in shown and "clipboard-copy" in shown  # the rest of the page stays
    assert "tools/docs.py" in Path(docs.ROOT / "mkdocs.yml").read_text().split("hooks:")[1]


def test_the_stamp_names_each_file_by_its_path(library):
    before = docs.library_hash()
    (library / "data" / "shapes.py").rename(library / "data" / "world.py")
    assert docs.library_hash() != before


def test_the_demo_is_trained_again_into_an_emptied_runs_folder_when_the_library_changes(
    library, tmp_path, monkeypatch
):
    trained = []

    def demo(command, **kwargs):  # `keras-saat demo --workdir W`, without the training
        workdir = Path(command[command.index("--workdir") + 1])
        (workdir / "eval" / "test").mkdir(parents=True)
        (workdir / "eval" / "test" / "metrics.json").write_text("{}")
        trained.append(workdir)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(docs.subprocess, "run", demo)
    runs = tmp_path / "runs"
    workdir = docs.train_demo(runs, log=lambda *a: None)
    assert trained == [workdir] and (runs / docs.RUNS_STAMP).read_text() == docs.library_hash()
    (runs / "shapes_hard_small").mkdir()  # notebook 5's model, trained by this library
    assert docs.train_demo(runs, log=lambda *a: None) == workdir and len(trained) == 1
    (library / "recipes" / "shapes_soft.yaml").write_text("train:\n  epochs: 30\n")
    docs.train_demo(runs, log=lambda *a: None)
    assert len(trained) == 2 and not (runs / "shapes_hard_small").exists()
    assert (runs / docs.RUNS_STAMP).read_text() == docs.library_hash()
    # A runs folder from before the stamp: its models' library is unknown.
    (runs / docs.RUNS_STAMP).unlink()
    docs.train_demo(runs, log=lambda *a: None)
    assert len(trained) == 3


# ------------------------------------------------------------------------ the records


def test_a_short_fit_must_lower_its_loss_and_name_some_scenes_not_every_one():
    captions = ["a red circle", "", "a blue square at the top"]
    demo = ["a red circle", "a blue square", "a green triangle"]
    shown = {"captions": captions, "demo_captions": demo, "nll": [2.1, 1.4]}
    assert docs.record_problems("03_training_fit", shown) == []
    # A trained model, the demo's beside it or a later page's, captions every image.
    beside = dict(shown, demo_captions=captions)
    assert docs.record_problems("03_training_fit", beside) == [
        f"its demo captions are all alike or empty: {captions}"
    ]
    later = {"captions": captions, "attention": [[[1.0] + [0.0] * 15]] * 3}
    assert docs.record_problems("06_export_serving", later) == [
        f"its captions are all alike or empty: {captions}"
    ]
    rising = docs.record_problems("03_training_fit", dict(shown, nll=[1.4, 2.1]))
    assert rising == ["its per-word NLL did not fall over its epochs: [1.4, 2.1]"]
    alike = dict(shown, captions=["a red circle", "", "a red circle"])
    assert docs.record_problems("03_training_fit", alike) == [
        "its captions are all alike or empty: ['a red circle', '', 'a red circle']"
    ]
    assert docs.record_problems("03_training_fit", {"captions": captions}) == [
        "its record has no 'demo_captions'",
        "its record has no 'nll'",
    ]


# ------------------------------------------------------------------- the published page


def test_a_page_has_its_headings_code_as_html_and_its_script_the_notebook_s(tmp_path):
    title = "# 3. Training with `fit()` on the Shapes world\n\nThe `Captioner` class."
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(title),
            nbformat.v4.new_code_cell("model.fit()"),
            nbformat.v4.new_markdown_cell(
                "## `compile()` and `fit()`\n\n## `a < b`\n```python\n# `code`\n```"
            ),
            nbformat.v4.new_code_cell("write()", metadata={"tags": [docs.RECORD_TAG]}),
        ]
    )
    executed, page = tmp_path / "executed.ipynb", tmp_path / "03_training_fit.ipynb"
    nbformat.write(notebook, executed)
    docs.publish(executed, page)
    cells = nbformat.read(str(page), as_version=4).cells
    assert [c.source for c in cells] == [
        "# 3. Training with <code>fit()</code> on the Shapes world\n\nThe `Captioner` class.",
        "model.fit()",
        "## <code>compile()</code> and <code>fit()</code>\n\n## <code>a &lt; b</code>\n"
        "```python\n# `code`\n```",
    ]
    script = page.with_suffix(".py").read_text()
    assert "# # 3. Training with `fit()` on the Shapes world" in script
    assert "write()" not in script

    # What mkdocs-jupyter makes of it: the title and contents keep `fit()`, and each
    # contents entry links to a heading id of the page.
    plugin = pytest.importorskip("mkdocs_jupyter.plugin")
    from mkdocs_jupyter import convert

    toc, name = plugin.get_nb_toc(str(page), 6)
    assert name == "3. Training with fit() on the Shapes world"
    entries = [toc.items[0], *toc.items[0].children]
    assert [e.title for e in entries][:2] == [name, "compile() and fit()"]
    ids, _ = docs_checks.page_anchors(convert.nb2html(str(page)))
    assert {e.url.lstrip("#") for e in entries} <= ids


# -------------------------------------------------------------------- in-page links


def test_anchor_problems_name_each_in_page_link_without_a_target(tmp_path):
    page = tmp_path / "tutorials" / "03_training_fit" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        '<a href="#3-training-with-on-the-shapes-world" class="md-skip">Skip to content</a>'
        '<nav><a href="#and" class="md-nav__link">and</a><a href="#and">and</a>'
        '<a href="#compile-and-fit">compile() and fit()</a><a href="#">top</a>'
        '<a href="#cell-id%3Dcell-00">cell</a><a href="#old">old</a></nav>'
        '<h1 id="3-training-with-fit-on-the-shapes-world">3.</h1><div id="cell-id=cell-00">'
        '<h2 id="compile-and-fit">compile()</h2><a name="old"></a><a href="../#x">other page</a>'
    )
    (tmp_path / "index.html").write_text('<a href="#a">a</a><h1 id="a">A</h1>')
    assert docs_checks.anchor_problems(tmp_path) == [
        "tutorials/03_training_fit/index.html: #3-training-with-on-the-shapes-world has no target",
        "tutorials/03_training_fit/index.html: #and has no target",
    ]


# ------------------------------------------------------- phrases that point at nothing


def test_stale_reference_problems_name_each_phrase_whose_target_is_not_there(tmp_path):
    (tmp_path / "README.md").write_text("# keras-saat\n\n## Results\n\nLimits: no GPU.\n")
    guides = tmp_path / "docs" / "guides"
    guides.mkdir(parents=True)
    (tmp_path / "docs" / "performance.md").write_text("# Performance\n\n## Decoding\n")
    (guides / "recipes.md").write_text(
        "Put the files where the table above says.\n\n"  # 3 and 2: the table is below
        "| paper | BLEU-4 |\n|---|---|\n| Flickr8k | 19.5 |\n\n"
        "The table above is the paper's; the Flickr8k numbers above too. Only the Shapes\n"
        'world numbers above were measured ("Robustness" below; "Memory allocation" below).\n'
        "**Robustness**: ...\n\n"
        '```python\nx = 1  # see "Memory allocation" below\n```\n'
        'The README\'s results; the performance page, "Decoding"; the performance page\'s "Serving".\n'
    )
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_markdown_cell("It learns slowly (see the README's\nlimits)."),
                nbformat.v4.new_code_cell("print(scores)  # the table above"),
                nbformat.v4.new_markdown_cell("The scores above are the hard model's."),
            ]
        ),
        notebooks / "05_hard_attention.ipynb",
    )
    assert docs_checks.stale_reference_problems(tmp_path) == [
        "docs/guides/recipes.md:1: 'the table above': no table or output above it",
        "docs/guides/recipes.md:7: 'the Shapes world numbers above': "
        "nothing above it is about 'Shapes world'",
        "docs/guides/recipes.md:8: '\"Memory allocation\" below': "
        "no heading or bold lead 'Memory allocation' below it",
        "docs/guides/recipes.md:12: '\"Memory allocation\" below': "
        "no heading or bold lead 'Memory allocation' below it",
        "docs/guides/recipes.md:14: 'the performance page\\'s \"Serving\"': "
        "docs/performance.md has no heading 'Serving'",
        'notebooks/05_hard_attention.ipynb, cell 0, line 1: "the README\'s limits": '
        "README.md has no section on 'limits'",
    ]


# ----------------------------------------------------------------- the build fails


def test_the_build_fails_on_a_stale_phrase_before_it_runs_anything(tmp_path, monkeypatch, capsys):
    found = ["docs/guides/recipes.md:3: 'the table above': no table or output above it"]
    monkeypatch.setattr(docs_checks, "stale_reference_problems", lambda root: found)
    monkeypatch.setattr(docs, "prepare", pytest.fail)  # nothing executed, nothing built
    assert docs.main(["build", "--site", str(tmp_path)]) == 1
    assert "phrases that point at nothing" in capsys.readouterr().err


@pytest.mark.parametrize("link, status", [("#and", 1), ("#compile-and-fit", 0)])
def test_the_build_fails_on_an_in_page_link_without_a_target(
    tmp_path, monkeypatch, capsys, link, status
):
    def mkdocs(command, **kwargs):  # `mkdocs build --site-dir S`, its page's contents
        site = Path(command[command.index("--site-dir") + 1])
        (site / "index.html").write_text(f'<a href="{link}">x</a><h2 id="compile-and-fit">')
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(docs_checks, "stale_reference_problems", lambda root: [])
    monkeypatch.setattr(docs, "prepare", lambda: None)
    monkeypatch.setattr(docs.subprocess, "run", mkdocs)
    assert docs.main(["build", "--site", str(tmp_path)]) == status
    assert ("index.html: #and has no target" in capsys.readouterr().err) == bool(status)


def test_the_home_figure_is_tutorial_4s_first_figure_2(tmp_path, monkeypatch):
    """The home page shows the Figure 2 of the build's own tutorial 4 (its demo model),
    and a page without one fails the build rather than keeping an old picture."""
    import base64

    monkeypatch.setattr(docs, "EXECUTED", tmp_path / "executed")
    monkeypatch.setattr(docs, "HOME_FIGURE", tmp_path / "generated" / "attention.png")
    png = b"\x89PNG\r\n\x1a\nfigure two"
    notebook = nbformat.v4.new_notebook()
    first = nbformat.v4.new_code_cell("beam = model.generate(paths)")
    first.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "AAAA"})]
    figure = nbformat.v4.new_code_cell("figure = plot_attention(image, words, maps)")
    figure.outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(png).decode()})
    ]
    notebook.cells = [first, figure]
    (tmp_path / "executed").mkdir()
    nbformat.write(notebook, str(tmp_path / "executed" / docs.HOME_PAGE_SOURCE))
    assert docs.draw_home_figure(log=lambda *_: None).read_bytes() == png
    notebook.cells = [first]
    nbformat.write(notebook, str(tmp_path / "executed" / docs.HOME_PAGE_SOURCE))
    with pytest.raises(docs.TutorialError, match="no Figure 2"):
        docs.draw_home_figure(log=lambda *_: None)


def test_the_projects_own_pages_point_at_what_they_name():
    """The check the docs build runs, on the repository's pages and notebooks, here in the
    fast suite: a phrase such as '"A heading" above' must find that heading."""
    assert docs_checks.stale_reference_problems() == []


def test_path_problems_name_each_missing_file_test_and_unlisted_result(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "tests" / "test_a.py").write_text("def test_here():\n    pass\n")
    for name in ("cpu-x-2026-01-01.json", "cpu-y-2026-01-01.json", "gpu-z-2026-01-02.json"):
        (tmp_path / "benchmarks" / "results" / name).write_text("{}")
    (tmp_path / "docs" / "page.md").write_text(
        "See `tests/test_a.py::test_here` and `tests/test_a.py::test_gone`,\n"
        "`benchmarks/nothing.py` and `benchmarks/results/cpu-*.json`.\n"
    )
    (tmp_path / "benchmarks" / "RESULTS.md").write_text(
        "| `results/cpu-*.json` | two runs |\n| `results/gpu-w-2026-01-02.json` | gone |\n"
    )
    assert docs_checks.path_problems(tmp_path) == [
        "docs/page.md:1: `tests/test_a.py`: tests/test_a.py defines no test_gone",
        "docs/page.md:2: `benchmarks/nothing.py`: no such file",
        "benchmarks/RESULTS.md:2: `benchmarks/results/gpu-w-2026-01-02.json`: no such file",
        "benchmarks/RESULTS.md: `benchmarks/results/gpu-z-2026-01-02.json`: not listed",
    ]


def test_the_projects_pages_name_files_that_are_there_and_list_every_result():
    assert docs_checks.path_problems() == []
