"""Fixtures of the driver tests: a real tracker process per test, and block helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sluice.embedded import TrackerProcess, driver_argv, start_tracker, stop_process


def driver_tracker(
    tmp_path: Path, port: int | None = None, remember_ms: int = 60_000, block_store: str | None = None
) -> TrackerProcess:
    """A tracker without fsync (the driver tests are not about durability) taking blocks stored in
    ``block_store``, default ``tmp_path/blocks`` (where the tests store them)."""
    return start_tracker(
        tmp_path / "wal",
        port=port,
        args=["--remember-ms", str(remember_ms), "--no-fsync"],
        block_store=block_store or (tmp_path / "blocks").as_uri(),
    )


@pytest.fixture
def tracker(tmp_path: Path):
    """A fresh ``sluice-tracker`` process (its own WAL) for one test."""
    proc = driver_tracker(tmp_path)
    yield proc
    stop_process(proc.proc)


def failing_driver(address: str, app: str, block_store: str, batch_interval_ms: int) -> list[str]:
    """A ``sluice-driver`` command on one local core whose first failed batch fails the run (no
    retry): the tests of batches that cannot be read run it to its end, then again."""
    return [
        sys.executable,
        *driver_argv(
            address,
            app=app,
            master="local[1]",
            batch_interval_ms=batch_interval_ms,
            block_store=block_store,
            extra=["--max-batch-retries", "0"],
        ),
    ]
