# Two entry points for a fresh machine: `make demo` and `make test` (see README.md; `make docs` builds docs/).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint typecheck test-fast docs install system-deps clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11 or newer is missing: install python3.11 and python3.11-venv"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { echo "could not create $(VENV): install python3-venv"; exit 1; }

# An editable install: the package is sluice/ itself, one path per module, so a module added or
# removed needs no reinstall; a change of pyproject.toml (dependencies, entry points) does.
$(STAMP): pyproject.toml | $(PY)
	@$(PY) -m pip install -q --upgrade pip >/dev/null || { echo "pip upgrade failed: is PyPI reachable?"; exit 1; }
	@$(PY) -m pip install -q -e '.[test,demo]' || { echo "installing sluice-streaming and its test extra failed: see pip's output above"; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

# The demo's own stamp: the package and its demo extra only (no test toolchain).
$(DEMO_STAMP): pyproject.toml | $(PY)
	@$(PY) -m pip install -q --upgrade pip >/dev/null || { echo "pip upgrade failed: is PyPI reachable?"; exit 1; }
	@$(PY) -m pip install -q -e '.[demo]' || { echo "installing sluice-streaming and its demo extra failed: see pip's output above"; exit 1; }
	@touch $(DEMO_STAMP)

# Java runs PySpark; the suite also runs prometheus, promtool, openssl and systemd-analyze.
system-deps:
	@bash scripts/system-deps.sh test

# make demo DEMO_ARGS='--seconds 120 --tracker-port 7200' passes options to sluice-demo.
demo: $(DEMO_STAMP)
	@bash scripts/system-deps.sh demo
	@$(VENV)/bin/sluice-demo $(DEMO_ARGS)

RUFF      := $(VENV)/bin/ruff
LINT      := $(RUFF) check . && $(RUFF) format --check .
# The package, then the benches and the tests (the tests at a lighter level: see pyproject.toml).
TYPECHECK := $(PY) -m mypy -p sluice && $(PY) -m mypy bench tests
# The documentation site (docs/ into site/, which git ignores), strictly: a broken link or anchor,
# or a generated section that cannot be filled, fails the build.
DOCS      := $(VENV)/bin/mkdocs build --strict --quiet
# The fast tier is every test not marked slow (a slow one takes seconds: real processes, Spark jobs,
# timing); it runs in under two minutes on two cores.  pytest exits 5 when it collects nothing,
# which fails make like any other non-zero status.  PYTEST_ARGS goes to both tiers: to run a few
# tests, give them to make test-fast or to pytest itself.
FAST      := $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)
SLOW      := $(PY) -m pytest -m slow $(PYTEST_ARGS)

lint: install
	@$(LINT)

typecheck: install
	@$(TYPECHECK)

docs: install
	@$(DOCS)

test-fast: system-deps install
	@$(FAST)

# Cheapest failure first, each test once: lint, types, docs, the fast tier, then the slow one.
test: system-deps install
	@$(LINT)
	@$(TYPECHECK)
	@$(DOCS)
	@$(FAST)
	@$(SLOW)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis sluice-demo-out site
