"""Fixtures of the driver tests: a real tracker process per test, and block helpers."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port, start_service, stop_process


@dataclass
class TrackerProcess:
    address: str
    proc: subprocess.Popen
    wal_dir: Path
    log: Path


def start_tracker(tmp_path: Path, port: int | None = None, remember_ms: int = 60_000) -> TrackerProcess:
    port = port or free_port()
    wal = tmp_path / "wal"
    log = tmp_path / "tracker.log"
    proc = start_service(["-m", "sluice.tracker.cli", "--listen", f"127.0.0.1:{port}", "--wal-dir", str(wal),
                          "--remember-ms", str(remember_ms), "--no-fsync"], port=port, log=log)
    return TrackerProcess(f"127.0.0.1:{port}", proc, wal, log)


@pytest.fixture
def tracker(tmp_path: Path):
    """A fresh ``sluice-tracker`` process (its own WAL) for one test."""
    proc = start_tracker(tmp_path)
    yield proc
    stop_process(proc.proc)
