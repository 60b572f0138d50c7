"""Builds the documentation site: executed tutorials, performance plots, then mkdocs.

    python tools/docs.py build [--site DIR]     # `make docs`: site/ (strict: a broken link fails)
    python tools/docs.py serve                  # `make docs-serve`: http://127.0.0.1:8000

The tutorial pages are the notebooks of notebooks/ with their outputs. Each one is
executed with the current code (small settings unless KERAS_SAAT_FULL=1) into
build/executed/, stamped with the SHA-256 of its source; a build reuses an executed copy
only when that stamp matches, so the figures on the pages always come from the current
notebooks (the notebook test leaves its executed copies there, and `make test` builds
the site after it).
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


def prepare(log=print):
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
