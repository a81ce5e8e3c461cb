# The two commands: `make up` runs the platform, `make test` runs every check.
# Both create .venv on first use; the stamp files reinstall when pyproject.toml changes.
# torch is pinned in pyproject.toml, so pip takes the CPU wheel from this machine's wheel dir.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UP_ARGS ?=

.PHONY: up test chromium

up: $(VENV)/.stamp-base
	$(BIN)/taas up $(UP_ARGS)

# pytest also runs ruff (lint and format), mypy and the import-layer contracts (tests/test_code_rules.py).
# Two processes (pytest-xdist): 14-40 minutes on the 2-core machine, by the day. The tests' Redis
# databases suffice for two, not more (tests/conftest.py, redis_test_url).
test: $(VENV)/.stamp-dev chromium
	$(BIN)/pytest -q -n 2

# The browser tests of /ops (tests/ops) drive Debian's chromium, never a downloaded browser:
# install it where it is missing (as root, with apt-get); otherwise say why they will skip.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get install -y --no-install-recommends chromium \
				|| { apt-get update && apt-get install -y --no-install-recommends chromium; }; \
		else \
			echo "make: /usr/bin/chromium is missing and cannot be installed here (needs root and apt-get):" \
				"run 'sudo apt-get install chromium', or the browser tests are skipped" >&2; \
		fi; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e .
	touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@ $(VENV)/.stamp-base
