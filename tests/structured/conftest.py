"""Helpers of the Structured Streaming tests: a real tracker process, blocks stored and reported as a
receiver would, and a query run to a point with the shared SparkSession."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.block_info import ReceivedBlockInfo
from sluice.processes import TrackerProcess, start_tracker, stop_process
from sluice.storage.block_store import Block, FileBlockStore


@pytest.fixture
def tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    """A fresh ``sluice-tracker`` process (its own WAL, fsync off) for one test."""
    proc = start_tracker(tmp_path / "wal", args=["--no-fsync"])
    yield proc
    stop_process(proc.proc)


def put_block(client, store: FileBlockStore, values: list, stream: int = 0) -> ReceivedBlockInfo:
    """Store one block of ``values`` and report it, as a receiver does (``client``: receiver role)."""
    block_id = f"b-{uuid.uuid4().hex[:12]}"
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
