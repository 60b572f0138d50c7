# The README's two commands. Each creates .venv (once) and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WORKDIR ?= runs/demo

.PHONY: demo test lint format

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Set up and run the main job: the Shapes demo (about 7 minutes on 2 CPU cores).
demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/keras-saat demo --workdir $(WORKDIR)

# Install what the tests need, lint, and run the whole suite (slow tests included).
test: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

lint: $(BIN)/python
	$(BIN)/ruff check .

format: $(BIN)/python
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
