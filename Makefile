# The README's two commands. Each creates .venv (once) and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WORKDIR ?= runs/demo

.PHONY: demo test test-fast docs notebooks docs-serve lint format browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Set up and run the main job: the Shapes demo (about 3 minutes on 2 CPU cores, plus the install).
demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/keras-saat demo --workdir $(WORKDIR)

# The suite runs on one pytest-xdist worker a core (at most 4); the tests that share the
# tutorials' model run on one of them, in order (tests/helpers.py, TUTORIALS).
PYTEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

# Install what the tests need, lint, and run the whole suite (slow tests included), which
# builds the docs site strictly and opens it in Chromium (tests/test_site.py).
test: $(BIN)/python browser
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST)

# The inner loop: the suite without the end-to-end tests marked slow (a few minutes).
test-fast: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(PYTEST) -m "not slow"

# The documentation site: executed tutorials, performance plots, mkdocs --strict, into site/.
docs: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python tools/docs.py build

# The executed tutorials written back into notebooks/ (executing those whose notebook or the
# library changed), so the repository shows what the site shows; commit them with the change.
notebooks: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python tools/docs.py notebooks

# The site on http://127.0.0.1:8000, rebuilt as the pages change.
docs-serve: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python tools/docs.py serve

lint: $(BIN)/python
	$(BIN)/ruff check .

format: $(BIN)/python
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The page test's browser: Debian's chromium and chromium-driver, installed where missing
# (as root, or with sudo that asks no password); otherwise say so, and that test skips.
browser:
	@if command -v chromedriver >/dev/null && { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }; then \
		echo "page test: using $$(command -v chromedriver)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "page test: installing chromium and chromium-driver (apt-get)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
			|| echo "page test: apt-get could not install chromium; the page test will be skipped"; \
	elif command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then \
		echo "page test: installing chromium and chromium-driver (sudo apt-get)"; \
		(sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
			|| echo "page test: apt-get could not install chromium; the page test will be skipped"; \
	else \
		echo "page test: chromium and chromium-driver are missing and cannot be installed here (needs apt-get as root); the page test will be skipped"; \
	fi
