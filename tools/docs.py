"""Builds the documentation site: executed tutorials, performance plots, then mkdocs.

    python tools/docs.py build [--site DIR]     # `make docs`: site/ (strict: a broken link fails)
    python tools/docs.py notebooks              # `make notebooks`: executed, into notebooks/
    python tools/docs.py serve                  # `make docs-serve`: http://127.0.0.1:8000

The tutorial pages are the notebooks of notebooks/ with their outputs. Each one is
executed with the current code (small settings unless KERAS_SAAT_FULL=1), its figures
compacted to a 256-colour palette (`compact_figures`), into build/executed/, stamped
with the SHA-256 of its cells' sources (not their outputs) and of the library (every
file under keras_saat/: code, recipes, package data; `library_hash`); a build reuses an
executed copy only when that stamp matches, so the figures on the pages always come from
the current notebooks and library (the notebook test leaves its executed copies there,
and `make test` builds the site after it). The notebooks are committed executed, so that
the repository shows what the site shows: `notebooks` writes the executed copies back
into notebooks/ without what changes from run to run (`committed`), and a committed
notebook whose stamp still matches is its own executed copy. Neither `build` nor the
suite writes into notebooks/. Each tutorial is served with its notebook and its code as
a script (the page's "Download the notebook" and "View source"). The maths renders with
KaTeX, installed from npm into build/npm/ and copied into the site: the pages load
nothing from another host, and mkdocs-jupyter's MathJax loader, whose address is empty,
is taken out of each page (`on_page_content`, this file being one of mkdocs.yml's
hooks).

Notebooks 3 to 6 share one model, the demo's: `keras-saat demo` (the `shapes_soft`
recipe) runs into the runs folder before the first notebook runs (`train_demo`), again
into an emptied folder when the library is not the one that folder's stamp
(<runs>/library.sha256) names. An executed notebook fails the build when what its page
shows is wrong: a notebook that shows a model writes what it showed (test BLEU-4,
captions, attention maps) to <runs>/<notebook>.json, and `page_problems` checks it
against bounds set from the demo; any stderr output, error or absolute path in an output
fails it too. So does, before mkdocs runs, a phrase of the prose that points at nothing
("the table above" with no table above it), and after it, an in-page link of the built
site with no target (a contents entry, "Skip to content"): tools/docs_checks.py.
"""

import argparse
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from keras_saat.cli.checks import DEMO_RECIPE

try:  # imported as tools.docs (the tests)
    from tools import docs_checks
except ImportError:  # run as tools/docs.py: tools/ is the first folder on sys.path
    import docs_checks

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "executed"
RUNS = ROOT / "build" / "notebook-runs"  # the demo's model is trained only to execute
TUTORIALS = ROOT / "docs" / "tutorials"
LIBRARY = ROOT / "keras_saat"  # what the pages show is computed by it: part of each stamp
STAMP = "keras_saat_source_sha256"  # an executed notebook's: its cells' and the library's
EXECUTED_WITH = "keras_saat_executed_with"  # date, version and commit (`executed_with`)
CELLS_STAMP = "keras_saat_cells_sha256"  # a committed notebook's: the cells its outputs are of
RUNS_STAMP = "library.sha256"  # <runs>/: the library the runs folder's models were trained by
KATEX = "katex@0.16.22"  # npm's package: the script, auto-render, the stylesheet, the fonts
KATEX_DIR = ROOT / "docs" / "assets" / "katex"

DEMO = DEMO_RECIPE  # the demo's recipe, and its workdir's name in the runs folder

# What each page shows and must show well: a recorded test BLEU-4 of at least
# MIN_BLEU_4[page], captions that differ from image to image, and attention maps whose
# peak is at least MIN_PEAK times a uniform map's (a trained soft attention peaks on the
# object it names; an untrained one is flat, a peak near 1). The bounds are set from the
# runs: the demo's model scores about 0.95 on its test split; notebook 5's hard attention,
# trained for fewer epochs than its recipe's, about 0.67; an untrained model 0 to 0.4.
# A check asserts only what the page's run guarantees: a couple of epochs of `fit()`
# (SHORT_FIT) lower the per-word NLL ("nll", by epoch) and name some scenes, but may
# leave an image's caption empty; a trained model, such as the demo's beside it
# ("demo_captions"), captions every image.
SHOWN = {
    "03_training_fit": {"captions", "demo_captions", "nll"},
    "04_decoding_evaluation": {"bleu_4", "captions", "attention", "hand_drawn"},
    "05_hard_attention": {"bleu_4", "captions"},
    "06_export_serving": {"captions", "attention"},
}
MIN_BLEU_4 = {"04_decoding_evaluation": 0.80, "05_hard_attention": 0.55}
SHORT_FIT = {"03_training_fit"}
# Of the hand-drawn scenes a page captions (keras_saat.data.shapes.HAND_DRAWN), how many
# must be named with the drawn colours and shapes. A model trained on the world alone
# names none, one whose pages are all evenly lit one, and the demo's recipe four in each
# seed's run (docs/performance.md, "Uneven light"): the page asks for three.
MIN_HAND_DRAWN = 4  # of the 5 packaged scenes; one miss left for another machine's numerics
MIN_PEAK = 4.0
RECORD_TAG = "keras-saat-record"  # the cell that writes <runs>/<notebook>.json


# The kernel's options. What is written to its file descriptors rather than through
# Python stays in the kernel's own log, off the pages: TensorFlow's C++ start-up lines
# (oneDNN, CUDA), written before absl's logging starts and so beyond
# TF_CPP_MIN_LOG_LEVEL, and the Java PTB tokenizer's count of tokens. Python's own
# warnings still reach the outputs, where `output_problems` fails them.
KERNEL_ARGUMENTS = (
    "--IPKernelApp.capture_fd_output=False",
    # TensorFlow's logger logs INFO in an interactive session, where tf.saved_model.save
    # logs its temporary assets folder; the level is set once TensorFlow has set its own.
    "--InteractiveShellApp.exec_lines=import tensorflow; tensorflow.get_logger().setLevel('WARNING')",
)


class TutorialError(RuntimeError):
    """An executed tutorial that shows a reader something wrong."""


def library_hash():
    """The SHA-256 of the library: every file under keras_saat/ (code, recipes, package
    data such as the hand-drawn scenes; not __pycache__), each one's path and contents,
    in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(LIBRARY.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            contents = hashlib.sha256(path.read_bytes()).hexdigest()
            digest.update(f"{path.relative_to(LIBRARY).as_posix()}\0{contents}\n".encode())
    return digest.hexdigest()


def cells_digest(notebook):
    """The SHA-256 of a notebook's cells as written: each one's type, tags and source, in
    order. Outputs, execution counts and metadata are left out, so a notebook and its
    executed copy (or the copy committed in notebooks/) digest alike.

    Args:
        notebook: dict. The notebook's JSON (an nbformat.NotebookNode is one).
    """
    written = [
        [c["cell_type"], c.get("metadata", {}).get("tags", []), "".join(c["source"])]
        for c in notebook["cells"]
    ]
    return hashlib.sha256(json.dumps(written).encode()).hexdigest()


def source_hash(path):
    """An executed notebook's stamp: the SHA-256 of its cells (`cells_digest`) and of the
    library."""
    cells = cells_digest(json.loads(Path(path).read_text()))
    return hashlib.sha256(f"{cells}\n{library_hash()}".encode()).hexdigest()


def kernel_environment(runs):
    """The environment the notebooks' kernel starts with: the runs folder relative to the
    kernel's working directory (so outputs show relative paths), and no TensorFlow C++
    start-up lines."""
    return {
        "KERAS_SAAT_NOTEBOOKS": Path(runs).name,
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",  # figures as outputs
        "KERAS_SAAT_FULL": os.environ.get("KERAS_SAAT_FULL", "0"),
        "TF_CPP_MIN_LOG_LEVEL": "3",  # no C++ start-up lines on the pages
        "NO_MKDOCS_2_WARNING": "1",
    }


def train_demo(runs, log=print):
    """Runs the demo into <runs>/shapes_soft unless it is there, trained by the current
    library (`keras-saat demo`, the README's main job: the shapes_soft recipe, about 3
    minutes on 2 CPU cores), its output into <runs>/shapes_soft.log: notebooks 3 to 6
    share its model. A runs folder whose stamp (<runs>/library.sha256) names another
    library is emptied first: every model in it (the demo's, notebook 5's hard one) was
    trained by that library.

    Args:
        runs: path. The notebooks' shared runs folder.
        log: callable. Defaults to print.

    Returns:
        Path: the demo's workdir.
    """
    # Absolute: the workdir's config names its files by the paths it was trained with,
    # and the notebooks' kernel runs in another folder.
    runs = Path(runs).resolve()
    workdir = runs / DEMO
    stamp, library = runs / RUNS_STAMP, library_hash()
    trained_by = stamp.read_text() if stamp.is_file() else None
    if trained_by == library and (workdir / "eval" / "test" / "metrics.json").is_file():
        return workdir
    if trained_by != library and runs.is_dir():
        if trained_by is not None:
            log(f"emptying {runs}: its models were trained by another version of keras_saat/")
        shutil.rmtree(runs)
    runs.mkdir(parents=True, exist_ok=True)
    log(f"running the demo (keras-saat demo, {DEMO}) into {workdir}: the tutorials' model")
    command = [sys.executable, "-m", "keras_saat.cli", "demo"]
    done = subprocess.run(
        [*command, "--workdir", str(workdir)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    (runs / f"{DEMO}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise TutorialError(
            f"the demo (the tutorials' model) failed (exit {done.returncode}); "
            f"see {runs / f'{DEMO}.log'}"
        )
    stamp.write_text(library)
    return workdir


def execute_notebook(path, runs, timeout=900):
    """Runs a notebook top to bottom (small settings) and returns it with its outputs (its
    figures compacted: `compact_figures`), stamped with its cells' and the library's hash
    (`source_hash`).

    Args:
        path: path. The notebook.
        runs: path. The notebooks' shared output folder; for a notebook that shows a
            model, the demo's is trained into it first (`train_demo`).
        timeout: seconds. The limit of one cell. Defaults to 900.

    Raises:
        CellExecutionError: a failing cell, with its traceback.
        TutorialError: the executed page shows something wrong (`page_problems`).
    """
    import nbformat
    from nbclient import NotebookClient

    runs = Path(runs)
    runs.mkdir(parents=True, exist_ok=True)  # the kernel starts in its parent
    stamp = source_hash(path)  # before it runs: a library edited meanwhile is not this one
    if Path(path).stem in SHOWN:  # the notebooks that show a model show the demo's
        train_demo(runs)
    notebook = nbformat.read(str(path), as_version=4)
    environment = kernel_environment(runs)
    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)  # the kernel inherits this process's environment
    record = runs / f"{Path(path).stem}.json"
    record.unlink(missing_ok=True)
    try:
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            extra_arguments=list(KERNEL_ARGUMENTS),
            resources={"metadata": {"path": str(runs.parent)}},
        )
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    problems = page_problems(notebook, Path(path).stem, runs)
    if problems:
        raise TutorialError(f"{Path(path).name}: " + "; ".join(problems))
    compact_figures(notebook)
    notebook.metadata[STAMP] = stamp
    notebook.metadata[EXECUTED_WITH] = executed_with()
    return notebook


FIGURE_COLOURS = 256  # a figure's palette once compacted (`compact_figures`)


def compact_png(png):
    """An opaque PNG with at most FIGURE_COLOURS colours (an octree palette, Floyd-Steinberg
    dithered), or `png` itself when that is no smaller or the image has transparency.
    The Shapes scenes' sensor noise makes a figure of them a megabyte of lossless PNG; the
    palette keeps it the same to the eye (colours, attention maps, text) at about a third.

    Args:
        png: bytes.

    Returns:
        bytes.
    """
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png))
    if image.mode not in ("RGB", "RGBA") or (
        image.mode == "RGBA" and image.getextrema()[3] != (255, 255)
    ):
        return png
    image = image.convert("RGB")
    palette = image.quantize(FIGURE_COLOURS, method=Image.Quantize.FASTOCTREE)
    compact = io.BytesIO()
    image.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG).save(
        compact, "PNG", optimize=True
    )
    return compact.getvalue() if len(compact.getvalue()) < len(png) else png


def compact_figures(notebook):
    """Re-encodes each PNG output of an executed notebook (`compact_png`), in place, so
    that the pages and the notebooks committed with their outputs stay small.

    Returns:
        (bytes before, bytes after) of the PNGs, base64-encoded as the notebook holds them.
    """
    import base64

    before = after = 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" not in data:
                continue
            encoded = data["image/png"]
            data["image/png"] = base64.b64encode(compact_png(base64.b64decode(encoded))).decode()
            before, after = before + len(encoded), after + len(data["image/png"])
    return before, after


def executed_with():
    """What executed a page: the date (UTC), keras-saat's version and the git commit
    (with "and local changes" when the tree differs from it; "no git" outside a clone)."""
    import datetime

    from keras_saat import __version__

    def git(*args):
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD") if shutil.which("git") else None
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += " and local changes"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "version": __version__,
        "commit": commit or "no git",
    }


def output_texts(notebook):
    """(cell index, output) pairs of a notebook's code cells, and each output's text."""
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            data = output.get("data", {})
            text += "".join(str(data[k]) for k in ("text/plain", "text/html") if k in data)
            text += "".join(output.get("traceback", []))
            yield index, output, text


def output_problems(notebook, runs):
    """What a page's outputs must not show: stderr boxes, errors, retracing warnings,
    temporary or absolute paths of the build."""
    folders = {"/tmp/", str(ROOT), str(Path(runs).resolve())}
    problems = []
    for index, output, text in output_texts(notebook):
        if output.get("name") == "stderr":
            problems.append(f"cell {index} writes to stderr: {text.strip()[:200]!r}")
        if output.get("output_type") == "error":
            problems.append(f"cell {index} raises {output.get('ename')}")
        if "retracing" in text:
            problems.append(f"cell {index} shows a retracing warning")
        for folder in sorted(folders):
            if folder in text:
                problems.append(f"cell {index} shows the build path {folder!r}")
    return problems


def attention_peak(maps):
    """The median over maps of each map's largest weight times its number of cells:
    1 for uniform maps, the number of cells for one-hot ones."""
    import numpy as np

    peaks = sorted(float(np.max(m)) * np.size(m) / max(float(np.sum(m)), 1e-12) for m in maps)
    return peaks[len(peaks) // 2] if peaks else 0.0


def record_problems(name, record):
    """What is wrong with what a page showed (its record), against the bounds above."""
    wanted = SHOWN.get(name, set())
    if not wanted:
        return []
    if record is None:
        return [f"it records nothing of what it shows (<runs>/{name}.json)"]
    problems = [f"its record has no {key!r}" for key in sorted(wanted - set(record))]
    bound = MIN_BLEU_4.get(name, 0.0)
    if "bleu_4" in wanted and "bleu_4" in record and not record["bleu_4"] >= bound:
        problems.append(
            f"test BLEU-4 {100 * record['bleu_4']:.1f} is under {100 * bound:.0f}: "
            f"the model it shows has not learned"
        )
    if "nll" in wanted and "nll" in record:
        nll = record["nll"]
        if len(nll) < 2 or not nll[-1] < nll[0]:
            problems.append(f"its per-word NLL did not fall over its epochs: {nll}")
    for key in sorted({"captions", "demo_captions"} & wanted & set(record)):
        captions = record[key]
        named = {c for c in captions if c.strip()}  # the different non-empty ones
        empty = len(named) < len(set(captions))
        if len(named) < 2 or (empty and not (name in SHORT_FIT and key == "captions")):
            shown = key.replace("_", " ")
            problems.append(f"its {shown} are all alike or empty: {captions[:3]}")
    if "hand_drawn" in wanted and "hand_drawn" in record:
        from keras_saat.evaluation.robustness import plain_caption

        right = sum(plain_caption(r["caption"]) == r["drawn"] for r in record["hand_drawn"])
        if right < MIN_HAND_DRAWN:
            shown = "; ".join(r["caption"] for r in record["hand_drawn"])
            problems.append(
                f"{right} of its hand-drawn scenes are captioned as drawn "
                f"(under {MIN_HAND_DRAWN}): {shown}"
            )
    if "attention" in wanted and "attention" in record:
        peak = attention_peak(record["attention"])
        if not peak >= MIN_PEAK:
            problems.append(
                f"its attention maps are flat (median peak {peak:.2f} times a uniform "
                f"map's, under {MIN_PEAK})"
            )
    return problems


def page_problems(notebook, name, runs):
    """Everything wrong with an executed tutorial's page (empty: it may be published)."""
    path = Path(runs) / f"{name}.json"
    record = json.loads(path.read_text()) if path.is_file() else None
    return output_problems(notebook, runs) + record_problems(name, record)


def save_executed(notebook, name):
    """Writes an executed notebook into build/executed/ (the docs build reads it there)."""
    import nbformat

    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(EXECUTED / name))


def executed_copy(path):
    """An executed copy of the notebook at `path` made from these very cells by this very
    library (`source_hash`), else None: build/executed/<name>, or the notebook itself
    when it is committed executed and its stamp still matches."""
    stamp = source_hash(path)
    for copy in (EXECUTED / Path(path).name, Path(path)):
        if copy.is_file() and json.loads(copy.read_text()).get("metadata", {}).get(STAMP) == stamp:
            return copy
    return None


# What a notebook's file may hold that changes from run to run, left out of the copy
# committed in notebooks/: each cell's execution times (nbclient's "execution", an
# extension's "ExecuteTime") and view state, and the kernel's version and widget state.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")
VOLATILE_METADATA = ("widgets",)
KEPT_LANGUAGE_INFO = ("name",)


def committed(executed, notebook):
    """The notebook as notebooks/ keeps it: its own cells (sources, ids, tags), each
    code cell with the executed copy's outputs and execution count, its stamp, the digest
    of its cells (CELLS_STAMP: the suite checks that the outputs are of these cells), and
    the version of keras-saat that executed it. Nothing that changes from run to run stays:
    no date or commit (`executed_with`), no VOLATILE_CELL_METADATA or VOLATILE_METADATA,
    no kernel version; a cell's consecutive stream outputs are one (the kernel splits a
    cell's printing wherever it happens to flush).

    Args:
        executed: nbformat.NotebookNode. The executed copy (`execute_notebook`).
        notebook: nbformat.NotebookNode. The notebook it was executed from (same cells).

    Returns:
        nbformat.NotebookNode. A new one; neither argument is changed.
    """
    import copy

    if cells_digest(executed) != cells_digest(notebook):
        raise TutorialError("the executed copy was not executed from this notebook's cells")
    kept = copy.deepcopy(notebook)
    for key in (*VOLATILE_METADATA, STAMP, CELLS_STAMP, EXECUTED_WITH):
        kept.metadata.pop(key, None)
    if "language_info" in kept.metadata:  # a reader's Jupyter saves the kernel's version
        info = kept.metadata["language_info"]
        kept.metadata["language_info"] = {k: info[k] for k in KEPT_LANGUAGE_INFO if k in info}
    kept.metadata[STAMP] = executed.metadata[STAMP]
    kept.metadata[CELLS_STAMP] = cells_digest(kept)
    if EXECUTED_WITH in executed.metadata:
        kept.metadata[EXECUTED_WITH] = {"version": executed.metadata[EXECUTED_WITH]["version"]}
    for cell, ran in zip(kept.cells, executed.cells, strict=True):
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            continue
        cell.execution_count = ran.execution_count
        cell.outputs = []
        for output in copy.deepcopy(ran.outputs):
            previous = cell.outputs[-1] if cell.outputs else None
            if (
                output.output_type == "stream"
                and previous is not None
                and previous.output_type == "stream"
                and previous.name == output.name
            ):
                previous.text += output.text
            else:
                cell.outputs.append(output)
    return kept


def write_notebooks(log=print):
    """Writes each tutorial's executed copy into notebooks/ (`committed`), executing the
    ones that have none first (as `prepare_tutorials` does): `make notebooks`, the
    developer's step that makes the repository show what the site shows. Neither the
    docs build nor the suite calls it.

    Args:
        log: callable. Defaults to print.

    Returns:
        list of Path: the notebooks written anew (those already current are left alone).
    """
    import nbformat

    written = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        copy = executed_notebook(path, log)
        executed = nbformat.read(str(copy), as_version=4)
        notebook = nbformat.read(str(path), as_version=4)
        text = nbformat.writes(committed(executed, notebook)) + "\n"
        if path.read_text() != text:
            path.write_text(text)
            written.append(path)
            log(f"wrote {path.relative_to(ROOT)} with its outputs")
    return written


def publish(executed, page):
    """Writes an executed notebook as a site page, less its record cells (what the page
    showed, written for `page_problems`: no part of the tutorial), and beside it its
    script (`write_script`). The page's headings have their code spans as HTML
    (`html_heading_code`); the script keeps the notebook's markdown."""
    import nbformat

    notebook = nbformat.read(str(executed), as_version=4)
    notebook.cells = [
        cell for cell in notebook.cells if RECORD_TAG not in cell.metadata.get("tags", [])
    ]
    write_script(notebook, Path(page).with_suffix(".py"))
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = html_heading_code(cell.source)
    run = notebook.metadata.get(EXECUTED_WITH)
    if run:  # the page says what executed it (a committed copy keeps the version alone)
        when = f" on {run['date']}" if "date" in run else ""
        commit = f" (commit {run['commit']})" if "commit" in run else ""
        notebook.cells.append(
            nbformat.v4.new_markdown_cell(
                f"*This page was executed{when} with keras-saat {run['version']}{commit} "
                "by `make docs`.*"
            )
        )
    nbformat.write(notebook, str(page))


def html_heading_code(markdown):
    """`markdown` with each heading's code spans as <code> elements. mkdocs-jupyter
    builds a notebook page's title and contents from its markdown with every `code`
    span deleted (so that a "#" in code reads as no heading), while the page's heading
    ids keep their text: "# Training with `fit()`" would be titled "Training with", and
    its contents entry and "Skip to content" would link to an id that is not on the page."""

    lines, fence = [], None
    for line in markdown.split("\n"):
        opening = re.match(r" {0,3}(```|~~~)", line)
        if opening and fence is None:
            fence = opening[1]
        elif opening and line.lstrip().startswith(fence):
            fence = None
        elif fence is None and re.match(r" {0,3}#{1,6}\s", line):  # a heading, not a comment
            line = re.sub(r"`([^`]+)`", lambda c: f"<code>{html.escape(c[1])}</code>", line)
        lines.append(line)
    return "\n".join(lines)


def executed_notebook(path, log=print):
    """The executed copy of notebook `path` for the current notebook and library, executing
    it first when there is none (in order, sharing one runs folder)."""
    copy = executed_copy(path)
    if copy is None:
        log(f"executing {path.name}")
        save_executed(execute_notebook(path, RUNS), path.name)
        copy = EXECUTED / path.name
    return copy


def prepare_tutorials(log=print):
    """Copies each notebook's executed version into docs/tutorials/, executing the
    notebooks that have none (in order, sharing one runs folder)."""
    TUTORIALS.mkdir(parents=True, exist_ok=True)
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        copy = executed_notebook(path, log)
        publish(copy, TUTORIALS / path.name)


def write_script(notebook, script):
    """Writes a notebook's cells as a Python script (the page's "View source"): code as
    it is, the prose as comments.

    Args:
        notebook: nbformat.NotebookNode.
        script: path. The script to write, <notebook's name>.py.
    """
    script = Path(script)
    lines = [f"# {script.with_suffix('.ipynb').name}: the keras-saat tutorial as a script.\n"]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            lines.append(f"\n{cell.source}\n")
        elif cell.cell_type == "markdown":
            lines.append(
                "\n" + "".join(f"# {line}".rstrip() + "\n" for line in cell.source.splitlines())
            )
    script.write_text("".join(lines))


def install_katex(log=print):
    """Copies KaTeX (npm's katex package) into docs/assets/katex/ unless that version is
    there: katex.min.js, auto-render.min.js, katex.min.css and the woff2 fonts."""
    stamp = KATEX_DIR / "VERSION"
    if stamp.is_file() and stamp.read_text() == KATEX:
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(
            "the docs' maths needs npm, to install KaTeX: apt-get install npm (or Node.js)"
        )
    log(f"installing {KATEX} (npm)")
    prefix = ROOT / "build" / "npm"
    flags = ["--no-save", "--no-audit", "--no-fund", "--silent"]
    subprocess.run([npm, "install", "--prefix", str(prefix), *flags, KATEX], check=True)
    dist = prefix / "node_modules" / "katex" / "dist"
    shutil.rmtree(KATEX_DIR, ignore_errors=True)
    (KATEX_DIR / "fonts").mkdir(parents=True)
    for name in ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js"):
        shutil.copyfile(dist / name, KATEX_DIR / Path(name).name)
    for font in (dist / "fonts").glob("*.woff2"):  # every browser the theme supports reads woff2
        shutil.copyfile(font, KATEX_DIR / "fonts" / font.name)
    stamp.write_text(KATEX)


HOME_FIGURE = ROOT / "docs" / "generated" / "attention.png"  # the home page's Figure 2
HOME_PAGE_SOURCE = "04_decoding_evaluation.ipynb"  # its first Figure 2 is the home page's


def draw_home_figure(log=print):
    """docs/generated/attention.png: the paper's Figure 2 as tutorial 4's executed page
    draws it (its first `plot_attention` figure), so the home page shows the build's demo
    model and its own caption, right or wrong."""
    import base64

    notebook = json.loads((EXECUTED / HOME_PAGE_SOURCE).read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code" or "plot_attention(" not in "".join(cell["source"]):
            continue
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                HOME_FIGURE.parent.mkdir(parents=True, exist_ok=True)
                HOME_FIGURE.write_bytes(base64.b64decode(output["data"]["image/png"]))
                log(f"home page figure: tutorial 4's first Figure 2 -> {HOME_FIGURE.name}")
                return HOME_FIGURE
    raise TutorialError(f"{HOME_PAGE_SOURCE} draws no Figure 2 for the home page")


# mkdocs-jupyter's MathJax loader, which each tutorial page gets from nbconvert's mathjax
# macro: a <script src=""> (the plugin's custom_mathjax_url, empty by default), which a
# browser fetches as the page itself, and its configuration. KaTeX renders the maths.
MATHJAX_LOADER = re.compile(
    r"<!-- Load mathjax -->\s*<script src=\"\">\s*</script>.*?"
    r"<!-- End of mathjax configuration -->",
    re.S,
)


def without_mathjax_loader(page):
    """A built page's HTML without mkdocs-jupyter's MathJax loader (MATHJAX_LOADER)."""
    return MATHJAX_LOADER.sub("", page)


def on_page_content(content, **kwargs):
    """mkdocs's hook (mkdocs.yml, `hooks`): each page's HTML, before the theme wraps it."""
    return without_mathjax_loader(content)


def prepare(log=print):
    install_katex(log)
    prepare_tutorials(log)
    draw_home_figure(log)
    sys.path.insert(0, str(ROOT / "tools"))
    from performance_plots import main as draw_plots

    draw_plots(["--out", str(ROOT / "docs" / "performance")])


def failed(what, problems):
    """Prints a failed check's problems, one a line; returns the exit status 1."""
    print(f"docs build failed: {what}:", *problems, sep="\n  ", file=sys.stderr)
    return 1


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build or serve the documentation site.")
    parser.add_argument(
        "command",
        choices=["build", "notebooks", "serve"],
        help="build: the site; notebooks: the executed tutorials into notebooks/; "
        "serve: the site, rebuilt as the pages change",
    )
    parser.add_argument("--site", default=str(ROOT / "site"), help="output folder of build")
    args = parser.parse_args(argv)
    if args.command == "notebooks":
        write_notebooks()
        return 0
    if args.command == "build" and (problems := docs_checks.stale_reference_problems(ROOT)):
        return failed("phrases that point at nothing (tools/docs_checks.py)", problems)
    if args.command == "build" and (problems := docs_checks.path_problems(ROOT)):
        return failed("files the pages name that are not there, results not listed", problems)
    prepare()
    mkdocs = [sys.executable, "-m", "mkdocs"]
    site = Path(args.site).resolve()
    if args.command == "build":
        command = [*mkdocs, "build", "--strict", "--site-dir", str(site)]
    else:
        command = [*mkdocs, "serve", "--dev-addr", "127.0.0.1:8000"]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    returncode = subprocess.run(command, cwd=ROOT, env=env).returncode
    if args.command == "serve" or returncode != 0:
        return returncode
    if problems := docs_checks.anchor_problems(site):
        return failed("in-page links with no target (a contents entry, a skip link)", problems)
    return 0


if __name__ == "__main__":
    sys.exit(main())
