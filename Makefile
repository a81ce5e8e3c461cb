# The two commands: `make up` runs the platform, `make test` runs every check.
# Both create .venv on first use; the stamp files reinstall when pyproject.toml changes.
# torch is pinned in pyproject.toml, so pip takes the CPU wheel from this machine's wheel dir.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UP_ARGS ?=

.PHONY: up test chromium docs-assets

up: $(VENV)/.stamp-base
	$(BIN)/taas up $(UP_ARGS)

# pytest also runs ruff (lint and format), mypy and the import-layer contracts (tests/test_code_rules.py).
# Two processes (pytest-xdist): 23-35 minutes on a 2-core machine, by the machine and the day (README).
# The tests' Redis databases suffice for two, not more (tests/conftest.py, redis_test_url).
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

# /docs and /redoc serve Swagger UI and ReDoc from service/api/static (no CDN: taas runs offline).
# This fetches the pinned npm packages and copies their files and licences there again
# (service/api/static/SOURCES.md lists them with their SHA-256; a test checks the copies).
SWAGGER_UI_DIST := swagger-ui-dist@5.35.0
REDOC := redoc@2.5.2
DOCS_ASSETS := service/api/static
docs-assets:
	rm -rf build/docs-assets && mkdir -p build/docs-assets/swagger build/docs-assets/redoc
	cd build/docs-assets && npm pack --silent $(SWAGGER_UI_DIST) $(REDOC) >/dev/null
	tar xzf build/docs-assets/swagger-ui-dist-*.tgz -C build/docs-assets/swagger
	tar xzf build/docs-assets/redoc-*.tgz -C build/docs-assets/redoc
	cd build/docs-assets/swagger/package && cp swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt \
		swagger-ui.css favicon-32x32.png $(CURDIR)/$(DOCS_ASSETS)/ \
		&& cp LICENSE $(CURDIR)/$(DOCS_ASSETS)/swagger-ui.LICENSE && cp NOTICE $(CURDIR)/$(DOCS_ASSETS)/swagger-ui.NOTICE
	cd build/docs-assets/redoc/package && cp bundles/redoc.standalone.js bundles/redoc.standalone.js.LICENSE.txt \
		$(CURDIR)/$(DOCS_ASSETS)/ && cp LICENSE $(CURDIR)/$(DOCS_ASSETS)/redoc.LICENSE
	cd $(DOCS_ASSETS) && sha256sum swagger-ui-bundle.js swagger-ui.css favicon-32x32.png redoc.standalone.js
