"""Builds the documentation site: executed tutorials, performance plots, then mkdocs.

    python tools/docs.py build [--site DIR]     # `make docs`: site/ (strict: a broken link fails)
    python tools/docs.py serve                  # `make docs-serve`: http://127.0.0.1:8000

The tutorial pages are the notebooks of notebooks/ with their outputs. Each one is
executed with the current code (small settings unless KERAS_SAAT_FULL=1) into
build/executed/, stamped with the SHA-256 of its source; a build reuses an executed copy
only when that stamp matches, so the figures on the pages always come from the current
notebooks (the notebook test leaves its executed copies there, and `make test` builds
the site after it). Each tutorial is served with its notebook and its code as a script
(the page's "Download the notebook" and "View source"). The maths renders with KaTeX,
installed from npm into build/npm/ and copied into the site: the pages load nothing
from another host.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "executed"
TUTORIALS = ROOT / "docs" / "tutorials"
STAMP = "keras_saat_source_sha256"
KATEX = "katex@0.16.22"  # npm's package: the script, auto-render, the stylesheet, the fonts
KATEX_DIR = ROOT / "docs" / "assets" / "katex"


def source_hash(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def execute_notebook(path, runs, timeout=900):
    """Runs a notebook top to bottom (small settings) and returns it with its outputs,
    stamped with its source's hash. `runs` is the notebooks' shared output folder
    (notebook 6 reuses notebook 4's model). A failing cell raises with its traceback."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(str(path), as_version=4)
    environment = {
        "KERAS_SAAT_NOTEBOOKS": str(runs),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",  # figures as outputs
        "KERAS_SAAT_FULL": os.environ.get("KERAS_SAAT_FULL", "0"),
        "TF_CPP_MIN_LOG_LEVEL": "3",  # no C++ start-up lines on the pages
        "NO_MKDOCS_2_WARNING": "1",
    }
    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)  # the kernel inherits this process's environment
    try:
        Path(runs).mkdir(parents=True, exist_ok=True)
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(Path(runs).parent)}},
        )
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    notebook.metadata[STAMP] = source_hash(path)
    return notebook


def save_executed(notebook, name):
    """Writes an executed notebook into build/executed/ (the docs build reads it there)."""
    import nbformat

    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(EXECUTED / name))


def executed_copy(path):
    """build/executed/<name> when it was executed from this very source, else None."""
    copy = EXECUTED / Path(path).name
    if not copy.is_file():
        return None
    stamp = json.loads(copy.read_text()).get("metadata", {}).get(STAMP)
    return copy if stamp == source_hash(path) else None


def prepare_tutorials(log=print):
    """Copies each notebook's executed version into docs/tutorials/, executing the
    notebooks that have none (in order, sharing one runs folder)."""
    TUTORIALS.mkdir(parents=True, exist_ok=True)
    runs = ROOT / "build" / "notebook-runs"
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        copy = executed_copy(path)
        if copy is None:
            log(f"executing {path.name}")
            save_executed(execute_notebook(path, runs), path.name)
            copy = EXECUTED / path.name
        shutil.copyfile(copy, TUTORIALS / path.name)
        write_script(TUTORIALS / path.name)


def write_script(notebook):
    """Writes a notebook's cells as a Python script beside it (the page's "View source"):
    code as it is, the prose as comments."""
    import nbformat

    lines = [f"# {notebook.name}: the keras-saat tutorial as a script.\n"]
    for cell in nbformat.read(str(notebook), as_version=4).cells:
        if cell.cell_type == "code":
            lines.append(f"\n{cell.source}\n")
        elif cell.cell_type == "markdown":
            lines.append(
                "\n" + "".join(f"# {line}".rstrip() + "\n" for line in cell.source.splitlines())
            )
    notebook.with_suffix(".py").write_text("".join(lines))


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


def prepare(log=print):
    install_katex(log)
    prepare_tutorials(log)
    sys.path.insert(0, str(ROOT / "tools"))
    from performance_plots import main as draw_plots

    draw_plots(["--out", str(ROOT / "docs" / "performance")])


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build or serve the documentation site.")
    parser.add_argument("command", choices=["build", "serve"])
    parser.add_argument("--site", default=str(ROOT / "site"), help="output folder of build")
    args = parser.parse_args(argv)
    prepare()
    mkdocs = [sys.executable, "-m", "mkdocs"]
    if args.command == "build":
        command = [*mkdocs, "build", "--strict", "--site-dir", str(Path(args.site).resolve())]
    else:
        command = [*mkdocs, "serve", "--dev-addr", "127.0.0.1:8000"]
    return subprocess.run(
        command, cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
