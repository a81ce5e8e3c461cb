# The two commands: `make up` runs the platform, `make test` runs every check.
# Both create .venv on first use; the stamp files reinstall when pyproject.toml changes.
# torch is pinned in pyproject.toml, so pip takes the CPU wheel from this machine's wheel dir.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UP_ARGS ?=

.PHONY: up test

up: $(VENV)/.stamp-base
	$(BIN)/taas up $(UP_ARGS)

# pytest also runs ruff and the import-layer contracts (tests/test_code_rules.py).
test: $(VENV)/.stamp-dev
	$(BIN)/pytest -q

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e .
	touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@ $(VENV)/.stamp-base
