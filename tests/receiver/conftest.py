"""Fixtures of the receiver tests: a real ``sluice-tracker`` process per test that needs one."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice.embedded import TrackerProcess, free_port, start_tracker


@dataclass
class PausableTracker(TrackerProcess):
    """A tracker process a test can freeze (SIGSTOP) to hold back acknowledgements; its metrics
    are served on ``metrics_port``."""

    metrics_port: int = 0

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def tracker_process(tmp_path: Path):
    metrics_port = free_port()
    started = start_tracker(
        tmp_path / "wal",
        args=["--liveness-timeout-ms", "60000", "--metrics-port", str(metrics_port)],
        block_store=(tmp_path / "blocks").as_uri(),
    )
    tracker = PausableTracker(started.address, started.proc, started.wal_dir, started.log, metrics_port)
    yield tracker
    tracker.resume()
    tracker.stop()  # a test may have restarted it
