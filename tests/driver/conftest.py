"""Fixtures of the driver tests: a real tracker process per test, and block helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.embedded import TrackerProcess, start_tracker, stop_process


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
