"""Session-wide fixtures, one of each per xdist worker: an Apache Kafka broker, an S3 server (moto)
and a SparkSession; fixture plugins.

``install_plugin`` writes real dist-info directories on ``sys.path``: ``importlib.metadata`` finds a
``<name>-<version>.dist-info`` directory with ``METADATA`` and ``entry_points.txt`` on any
``sys.path`` entry exactly as it finds what pip installed, so these plugins travel the same road as
a ``pip install``-ed one: no hook is monkeypatched.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sluice import plugins
from sluice.embedded import KafkaBroker, start_kafka, wait_until
from sluice.testing import MotoServer, start_moto
from tests.observe import leftover_processes

# Structured Streaming options may name files only in the server's allowed directories: every
# test's files are under the temp directory (set before any SparkSession, whose workers inherit it).
os.environ.setdefault("SLUICE_STRUCTURED_FILE_DIRS", tempfile.gettempdir())


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka's own broker (one KRaft node, from its Maven jars) on free loopback ports; tests
    take their own topics and groups."""
    broker = start_kafka(tmp=tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A real S3 API (moto's server, in memory) on a free loopback port; tests take fresh buckets."""
    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()
    wait_until(lambda: not leftover_processes(f"-p\0{server.port}"), "moto's server gone", 20)


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (local[2], no UI)."""
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # tests stay on loopback
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """``install_plugin(ep_name, source, dist=None) -> module name``: writes a module and a
    distribution whose ``sluice`` entry point ``ep_name`` names it, on a fresh ``sys.path`` entry."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    modules: list[str] = []

    def install(ep_name: str, source: str, dist: str | None = None) -> str:
        module = f"sluice_fixture_{ep_name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        dist = dist or f"sluice-fixture-{ep_name}"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[sluice]\n{ep_name} = {module}\n")
        importlib.invalidate_caches()
        plugins.refresh()  # the registries are kept per process: scan the installed plugins again
        modules.append(module)
        return module

    yield install
    for module in modules:
        sys.modules.pop(module, None)
    plugins.refresh()


pytest_plugins = ["tests.timings"]

# Each test's wall seconds in the last full run (scripts/test_times.py durations): the longest go
# first, so that under pytest-xdist the fault campaign's minutes overlap the rest of its tier instead
# of running last on one worker while the others sit idle.
DURATIONS = Path(__file__).with_name("durations.json")
# A test the file does not know yet (new, or under a second last time).
UNKNOWN_S = 1.0


def longest_first(items: list[pytest.Item], known: dict[str, float]) -> None:
    """Order the tests as pytest-xdist's ``loadgroup`` hands them out: by scope (an ``xdist_group``,
    whose tests run one after another on one worker, or a single test), the longest scope first by
    the seconds ``known`` gives each test; ties keep the collection's order."""

    def scope(item: pytest.Item) -> str:
        group = item.get_closest_marker("xdist_group")
        return f"group:{group.args[0]}" if group and group.args else item.nodeid

    seconds: dict[str, float] = {}
    for item in items:
        seconds[scope(item)] = seconds.get(scope(item), 0.0) + known.get(item.nodeid, UNKNOWN_S)
    items.sort(key=lambda item: -seconds[scope(item)])


def _reason(item: pytest.Item, name: str) -> None:
    for mark in item.iter_markers(name):
        if not (mark.args and isinstance(mark.args[0], str) and mark.args[0].strip()):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} needs its reason as a string")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Before ``-m`` selects: a test that takes the SparkSession is marked ``spark`` and ``slow`` (the
    JVM takes seconds to start on two cores and each job about a second more, so the fast tier never
    starts Spark), and one that takes the broker ``kafka`` and ``slow``; a bench's smoke run
    (``smoke``) is slow too; a ``timing`` test joins the xdist group of its kind.  Then the longest
    go first."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)
        if "kafka_broker" in fixtures:  # Apache Kafka's JVM takes seconds to start
            item.add_marker(pytest.mark.kafka)
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("smoke"):
            item.add_marker(pytest.mark.slow)
        _reason(item, "timing")
        _reason(item, "alone")
        if item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.xdist_group("timing"))
    longest_first(items, json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test imported a service folder under its bare name (``import tracker``):
    Sluice is installed only as ``sluice.*``, and a module loaded twice registers its metrics twice."""
    bare = sorted(
        m for m in sys.modules if m.split(".")[0] in ("receiver", "tracker", "estimators", "spark_driver", "demo")
    )
    if bare:
        print(f"\nmodules imported under a bare name instead of sluice.*: {', '.join(bare)}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
