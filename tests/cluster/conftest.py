"""A real Spark standalone cluster (:mod:`sluice.testing.standalone`: one master and two one-core
workers on 127.0.0.1), started once for the module that uses it and stopped with every process it
spawned."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.embedded import wait_until
from sluice.testing.standalone import SPARK_HOME, StandaloneCluster, start_standalone
from tests.observe import leftover_processes

SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = start_standalone(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()
    wait_until(lambda: not leftover_processes(cluster.marker), "every process of the cluster gone", 20)
