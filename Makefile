# Two entry points for a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install system-deps clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11 or newer is missing: install python3.11 and python3.11-venv"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { echo "could not create $(VENV): install python3-venv"; exit 1; }

$(STAMP): pyproject.toml | $(PY)
	@$(PY) -m pip install -q --upgrade pip >/dev/null || { echo "pip upgrade failed: is PyPI reachable?"; exit 1; }
	@$(PY) -m pip install -q -e '.[test,demo]' || { echo "installing sluice-streaming and its test extra failed: see pip's output above"; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

# Java runs PySpark; the suite also runs prometheus, promtool, openssl and systemd-analyze.
system-deps:
	@bash scripts/system-deps.sh test

demo: install
	@bash scripts/system-deps.sh demo
	@$(VENV)/bin/sluice-demo

# ruff and mypy first: a lint or type error fails the run before the suite starts.
test: system-deps install
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(PY) scripts/typecheck.py
	@$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis sluice-demo-out
