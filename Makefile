# Two entry points for a fresh machine: `make demo` and `make test` (see README.md; `make docs` builds docs/).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: kafka demo test lint typecheck test-fast test-times docs install system-deps clean

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

# Apache Kafka's pinned broker jars from Maven Central, once, into a cache outside the repository
# (~/.cache/sluice/maven; SLUICE_CACHE moves it): the demo's embedded broker and the tests' brokers.
# It also builds Spark's class-data-sharing archive, once per machine (sluice.embedded.class_data):
# the tests start hundreds of Spark applications, and each maps the classes instead of loading them.
# The archive only saves CPU: should it fail to build, the tiers run without it, saying so once.
# Last, the pyspark zip Spark's Python workers import gets its modules' bytecode, once
# (sluice.embedded.python_workers): compiling them in every worker cost a third of its start,
# and Spark gives a worker 10 s to connect back.
kafka: install
	@$(PY) -m sluice.embedded --fetch
	@$(PY) -m sluice.embedded --worker-bytecode
	@$(PY) -m sluice.embedded --spark-jvm-options > /dev/null || echo "the tiers run without Spark's class-data archive"

# make demo DEMO_ARGS='--seconds 120 --tracker-port 7200' passes options to sluice-demo.
demo: $(DEMO_STAMP)
	@bash scripts/system-deps.sh demo
	@$(PY) -m sluice.embedded --fetch --default-only
	@$(VENV)/bin/sluice-demo $(DEMO_ARGS)

RUFF      := $(VENV)/bin/ruff
LINT      := $(RUFF) check . && $(RUFF) format --check .
# The package, then the benches and the tests (the tests at a lighter level: see pyproject.toml).
TYPECHECK := $(PY) -m mypy -p sluice && $(PY) -m mypy bench tests
# The documentation site (docs/ into site/, which git ignores), strictly: a broken link or anchor,
# or a generated section that cannot be filled, fails the build.
DOCS      := $(VENV)/bin/mkdocs build --strict --quiet
# The tiers run on pytest-xdist workers, each with its own session fixtures (a broker, an S3 server,
# a SparkSession), temporary directories and free ports.  --dist loadgroup keeps an xdist_group on
# one worker (the `timing` tests, one at a time); --no-loadscope-reorder keeps the collection's order,
# which puts the long runs first (tests/conftest.py), so they overlap the rest.
#   fast:  every test not marked slow, two workers on two cores (CPU-bound: more would only queue).
#   slow:  real processes, Spark, timing; four workers, because most of it waits (JVMs starting,
#          brokers, timeouts) and the waits overlap.
#   smoke: the benches' quick runs (marker smoke), two at a time, after the slow tier: beside it
#          (six workers on two cores) a machine running at half speed pushed Spark's Python
#          workers past the 10 s Spark gives them to connect back, and quick runs past their limits.
#   alone: the tests that must overlap no other (marker alone), one after another.
# pytest exits 5 when a tier collects nothing, which fails make like any other non-zero status.
# PYTEST_ARGS goes to every tier: to run a few tests, give them to make test-fast or to pytest.
# Each tier writes its timings (tests/timings.py) to $(TIMES); `make test` ends with a line per tier.
TIMES     := .test-times
# The JVMs of the parallel tiers' Spark applications (the tests' SparkSessions and every driver they
# start: in client mode the driver is spark-submit's JVM) compile with C1 only and collect with the
# serial collector: a Spark application that lives seconds then costs about half the CPU (33 s
# against 16 s for a start and two small jobs on this machine), and the tiers share two cores.  The
# alone tier keeps Spark's defaults: it measures throughput and latency as a user's driver would run.
# The standalone clusters of the tests start their daemons and executors the same way as the drivers
# (sluice.testing.standalone.cluster_jvm): only spark-submit reads SPARK_SUBMIT_OPTS.
# Every tier maps Spark's classes from the archive the kafka target builds (a start costs a third
# less CPU); the tiers never build it themselves, and without it the substitution prints nothing.
SPARK_CDS := $$($(PY) -m sluice.embedded --spark-jvm-options --no-build)
# The parallel tiers' Kafka brokers start the same way (2.5 CPU s against 3.9 for a start and a
# few thousand records), through the variable Kafka's own scripts read.
TEST_JVM  := SPARK_SUBMIT_OPTS="$${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC} $(SPARK_CDS)" \
             KAFKA_JVM_PERFORMANCE_OPTS="$${KAFKA_JVM_PERFORMANCE_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
TIER       = $(PY) -m pytest --timings=$(TIMES)/$(1).json --timings-tier=$(1) --dist loadgroup --no-loadscope-reorder
FAST      := $(TEST_JVM) $(call TIER,fast) -n 2 -m "not slow and not alone" $(PYTEST_ARGS)
SLOW      := $(TEST_JVM) $(call TIER,slow) -n 4 -m "slow and not smoke and not alone" $(PYTEST_ARGS)
SMOKE     := $(TEST_JVM) $(call TIER,smoke) -n 2 -m smoke $(PYTEST_ARGS)
ALONE     := SPARK_SUBMIT_OPTS="$${SPARK_SUBMIT_OPTS:-} $(SPARK_CDS)" $(call TIER,alone) -n 0 -m alone $(PYTEST_ARGS)
TIMES_SUMMARY := $(PY) scripts/test_times.py summary $(TIMES)/fast.json $(TIMES)/slow.json $(TIMES)/smoke.json $(TIMES)/alone.json

lint: install
	@$(LINT)

typecheck: install
	@$(TYPECHECK)

docs: install
	@$(DOCS)

test-fast: system-deps install
	@$(FAST)

# pytest caches each test module as it rewrites its asserts in a .pyc (git ignores them): without
# it every worker of every tier rewrites all of them again, seconds of CPU each.
export PYTHONDONTWRITEBYTECODE :=

# Cheapest failure first, each test once: lint, types, docs, the fast tier, then the slow ones.
test: system-deps install kafka
	@$(LINT)
	@$(TYPECHECK)
	@$(DOCS)
	@rm -rf $(TIMES)
	@$(FAST)
	@$(SLOW)
	@$(SMOKE)
	@$(ALONE)
	@$(TIMES_SUMMARY)

# The table of where the suite's time goes (docs/development.md) and each test's seconds (the order
# tests/conftest.py starts them in), from the last `make test`'s timings.
test-times: install
	@$(PY) scripts/test_times.py table $(TIMES)/*.json --write docs/test-times.json
	@$(PY) scripts/test_times.py durations $(TIMES)/*.json --write tests/durations.json

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis sluice-demo-out site $(TIMES)
