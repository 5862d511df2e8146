"""Fixtures of the receiver tests: a real ``sluice-tracker`` process per test that needs one."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import pytest

from tests.support import free_port, start_service, stop_process


@dataclass
class TrackerProcess:
    address: str
    proc: Popen
    log: Path
    metrics_port: int

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def tracker_process(tmp_path: Path):
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "tracker.log"
    proc = start_service(["-m", "sluice.tracker.cli", "--listen", f"127.0.0.1:{port}", "--wal-dir",
                          str(tmp_path / "wal"), "--liveness-timeout-ms", "60000", "--metrics-port",
                          str(metrics_port)], port=port, log=log)
    tracker = TrackerProcess(f"127.0.0.1:{port}", proc, log, metrics_port)
    yield tracker
    tracker.resume()
    stop_process(tracker.proc)  # a test may have restarted it
