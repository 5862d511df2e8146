"""Helpers of the Structured Streaming tests: a real tracker process, blocks stored and reported as a
receiver would, and a query run to a point with the shared SparkSession."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice.block_info import ReceivedBlockInfo
from sluice.embedded import TrackerProcess, free_port, start_process, start_tracker, stop_process, wait_for_port
from sluice.storage.block_store import Block, FileBlockStore


@pytest.fixture
def tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    """A fresh ``sluice-tracker`` process (its own WAL, fsync off, blocks in ``tmp_path/blocks``) for one test."""
    proc = start_tracker(tmp_path / "wal", args=["--no-fsync"], block_store=(tmp_path / "blocks").as_uri())
    yield proc
    stop_process(proc.proc)


def put_block(client, store: FileBlockStore, values: list, stream: int = 0) -> ReceivedBlockInfo:
    """Store one block of ``values`` and report it, as a receiver does (``client``: receiver role; it
    registers first, as a receiver does, since the tracker takes blocks of registered streams only)."""
    client.register_receiver(stream, "test-receiver", "test-host")
    block_id = f"input-{stream}-test-receiver-{client.incarnation('test-receiver')}-{uuid.uuid4().hex[:12]}"
    location = store.write(Block(stream, block_id, list(values)))
    info = ReceivedBlockInfo(stream, block_id, "test-receiver", len(values), location)
    assert client.add_block(info).accepted
    return info


@pytest.fixture
def registered(spark):
    """The shared session with both sources registered (once per session is enough)."""
    from sluice.spark_driver.structured import register

    register(spark)
    return spark


@dataclass
class ConnectServer:
    """A Spark Connect server started from the installed pyspark package."""

    port: int
    proc: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """pyspark's own ``SparkConnectServer`` (its jar ships in ``pyspark/jars``) through
    ``spark-submit``, local[2], on a free loopback port; Python workers run this interpreter."""
    import pyspark

    home = Path(pyspark.__file__).parent
    port = free_port()
    log = tmp_path_factory.mktemp("connect") / "connect.log"
    proc = start_process(
        [
            str(home / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master",
            "local[2]",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "spark-internal",
        ],
        log=log,
        env={"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(home)},
    )
    try:
        wait_for_port(port, proc, name="the Spark Connect server", timeout=180)
        yield ConnectServer(port, proc, log)
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def spark_kafka(spark):
    """The shared session with Sluice's sources registered and Spark's own Kafka source
    (``format("kafka")``) added to it, once per worker (:func:`sluice.embedded.spark_kafka.add_spark_kafka`:
    ``ADD JAR`` into the running session, so no second JVM starts and the session's other tests pay nothing)."""
    from sluice.embedded.spark_kafka import add_spark_kafka
    from sluice.spark_driver.structured import register

    register(spark)
    add_spark_kafka(spark)
    return spark
