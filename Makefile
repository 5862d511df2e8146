# Two entry points for a fresh machine: `make demo` and `make test` (see README.md; `make docs` builds docs/).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test docs install system-deps clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11 or newer is missing: install python3.11 and python3.11-venv"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { echo "could not create $(VENV): install python3-venv"; exit 1; }

# Strict editable mode: a static path (no import hook) to links of the package's files, so mypy and
# IDEs see what Python imports; a module added or removed takes a reinstall, hence the folders.
$(STAMP): pyproject.toml $(shell find -L sluice -type d -not -name __pycache__) | $(PY)
	@$(PY) -m pip install -q --upgrade pip >/dev/null || { echo "pip upgrade failed: is PyPI reachable?"; exit 1; }
	@$(PY) -m pip install -q -e '.[test,demo]' --config-settings editable_mode=strict || { echo "installing sluice-streaming and its test extra failed: see pip's output above"; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

# The demo's own stamp: the package and its demo extra only (no test toolchain).
$(DEMO_STAMP): pyproject.toml $(shell find -L sluice -type d -not -name __pycache__) | $(PY)
	@$(PY) -m pip install -q --upgrade pip >/dev/null || { echo "pip upgrade failed: is PyPI reachable?"; exit 1; }
	@$(PY) -m pip install -q -e '.[demo]' --config-settings editable_mode=strict || { echo "installing sluice-streaming and its demo extra failed: see pip's output above"; exit 1; }
	@touch $(DEMO_STAMP)

# Java runs PySpark; the suite also runs prometheus, promtool, openssl and systemd-analyze.
system-deps:
	@bash scripts/system-deps.sh test

# make demo DEMO_ARGS='--seconds 120 --tracker-port 7200' passes options to sluice-demo.
demo: $(DEMO_STAMP)
	@bash scripts/system-deps.sh demo
	@$(VENV)/bin/sluice-demo $(DEMO_ARGS)

# The documentation site (docs/ into site/, which git ignores), strictly: a broken link or anchor,
# or a generated section that cannot be filled, fails the build.
docs: install
	@$(VENV)/bin/mkdocs build --strict --quiet

# ruff, mypy and the docs first: a lint, type or docs error fails the run before the suite starts.
test: system-deps install
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(PY) -m mypy -p sluice
	@$(MAKE) --no-print-directory docs
	@$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis sluice-demo-out site
