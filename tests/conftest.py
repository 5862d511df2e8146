"""Session-wide fixtures: one tansu broker and one SparkSession for the whole run."""

from __future__ import annotations

import os
import sys

import pytest

from tests.support import Broker, start_broker


@pytest.fixture(scope="session")
def kafka_broker() -> Broker:
    """A real Kafka-protocol broker (tansu, memory storage) on a free loopback port."""
    broker = start_broker()
    yield broker
    broker.stop()


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test imported a card folder under its bare name (``import tracker``):
    Sluice is installed only as ``sluice.*``, and a module loaded twice registers its metrics twice."""
    bare = sorted(m for m in sys.modules if m.split(".")[0] in ("receiver", "tracker", "estimators", "spark_driver",
                                                                 "demo"))
    if bare:
        print(f"\nmodules imported under a bare name instead of sluice.*: {', '.join(bare)}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
