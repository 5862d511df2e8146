"""Fixtures of the receiver tests: a real ``sluice-tracker`` process per test that needs one."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from sluice.processes import TrackerProcess, start_tracker


class PausableTracker(TrackerProcess):
    """A tracker process a test can freeze (SIGSTOP) to hold back acknowledgements."""

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def tracker_process(tmp_path: Path):
    started = start_tracker(tmp_path / "wal", args=["--liveness-timeout-ms", "60000"])
    tracker = PausableTracker(started.address, started.proc, started.wal_dir, started.log)
    yield tracker
    tracker.resume()
    tracker.stop()
