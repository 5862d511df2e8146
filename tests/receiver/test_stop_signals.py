"""``sluice-receiver`` stops on SIGTERM and SIGINT within its stated bound while it waits for a
tracker that is not there and during a tracker outage, and says what it waits for: real
processes.  :data:`SLACK` is what delivering a signal and reaping a process may add."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sluice.embedded import free_port, start_tracker, stop_process, wait_until
from sluice.receiver.cli import EXIT_FORCED

from .test_workers import worker

pytestmark = [pytest.mark.slow]

SLACK = 1.0
CONNECTING_BOUND_S = 2.0


def exit_within(proc: subprocess.Popen, sig: int, bound_s: float, log: Path) -> tuple[int, float]:
    started = time.monotonic()
    proc.send_signal(sig)
    try:
        status = proc.wait(bound_s + SLACK)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the receiver did not exit within {bound_s} s (+{SLACK} s):\n{log.read_text()[-3000:]}")
    return status, time.monotonic() - started


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_waiting_for_a_missing_tracker_says_so_and_stops_within_2_s(tmp_path: Path, sig: int) -> None:
    port = free_port()
    proc = worker(tmp_path, f"127.0.0.1:{port}", "wn", "--source", "generator")
    log = tmp_path / "wn.log"
    try:
        wait_until(lambda: "cannot reach" in log.read_text(), "the first warning", 60, [proc], log)
        status, _ = exit_within(proc, sig, CONNECTING_BOUND_S, log)
    finally:
        stop_process(proc, signal.SIGKILL)
    text = log.read_text()
    assert (
        f"WARNING sluice.tracker.client.connection: cannot reach the tracker at 127.0.0.1:{port} "
        "(connection refused); retrying every 2.0 s at most"
    ) in text
    assert text.count("cannot reach") == 1 and "Traceback" not in text
    assert status == 0, text


def test_a_tracker_outage_is_one_line_recovery_one_line_and_the_stop_is_bounded(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    tracker = start_tracker(tmp_path / "wal", port=port, block_store=(tmp_path / "blocks").as_uri())
    log = tmp_path / "wo.log"
    proc = worker(
        tmp_path, address, "wo", "--source", "generator", "--generator-rate", "1000", "--stop-timeout-ms", "2000"
    )
    try:
        wait_until(lambda: "started (rate" in log.read_text(), "the receiver started", 60, [proc], log)
        stop_process(tracker.proc, signal.SIGKILL)
        wait_until(lambda: f"cannot reach the tracker at {address}" in log.read_text(), "the warning", 30, [proc], log)
        time.sleep(3.0)  # heartbeats and pushes fail meanwhile: still one line
        assert log.read_text().count("cannot reach") == 1
        tracker = start_tracker(tmp_path / "wal", port=port, block_store=(tmp_path / "blocks").as_uri())
        recovered = re.compile(rf"INFO sluice.tracker.client.connection: reached the tracker at {address} after ")
        wait_until(lambda: recovered.search(log.read_text()), "the recovery line", 30, [proc], log)
        stop_process(tracker.proc, signal.SIGKILL)  # a second outage, and a stop during it
        wait_until(lambda: log.read_text().count("cannot reach") == 2, "the second outage", 30, [proc], log)
        status, _ = exit_within(proc, signal.SIGTERM, 2.0, log)
    finally:
        stop_process(proc, signal.SIGKILL)
        stop_process(tracker.proc)
    text = log.read_text()
    assert "Traceback" not in text
    assert status == EXIT_FORCED and "abandoning" in text, text[-3000:]
