"""``sluice-driver`` stops on SIGTERM and SIGINT within its stated bound in every state, and says
so while it waits for its tracker: real processes (driver, tracker), real Spark.

The bounds are the ones ``sluice.spark_driver.cli`` documents; :data:`SLACK` is what delivering a
signal and reaping a process may add on a loaded machine.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sluice.embedded import driver_argv, free_port, start_process, stop_process, wait_until
from sluice.spark_driver.cli import EXIT_FORCED, GRACE_S

from .conftest import driver_tracker

pytestmark = [
    pytest.mark.timing(
        "tolerates stop bounds of the grace plus 1 s against Spark jobs of seconds: three busy workers beside it"
    ),
    pytest.mark.slow,
    pytest.mark.timeout(600),
]  # Spark starts in each test

INTERVAL_MS = 500
SLACK = 1.0
SPARK_START_S = 240  # a loaded two-core machine takes minutes to start a JVM


class Driver:
    """A ``sluice-driver`` running ``tests.driver.apps:held`` on ``local[1]``, logging to a file."""

    def __init__(self, tmp_path: Path, tracker: str, *args: str, held: bool = False) -> None:
        self.log = tmp_path / "driver.log"
        self.marks = tmp_path / "marks"
        self.hold = tmp_path / "hold"
        if held:
            self.hold.touch()
        self.proc = start_process(
            [
                sys.executable,
                *driver_argv(
                    tracker, app="tests.driver.apps:held", master="local[1]", batch_interval_ms=INTERVAL_MS, extra=args
                ),
            ],
            log=self.log,
            env={
                "SLUICE_TEST_MARKS": str(self.marks),
                "SLUICE_TEST_HOLD": str(self.hold),
                "SPARK_LOCAL_IP": "127.0.0.1",
            },
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, what: str | re.Pattern[str], timeout: float = SPARK_START_S) -> None:
        found = (lambda: what.search(self.text())) if isinstance(what, re.Pattern) else (lambda: what in self.text())
        wait_until(found, repr(what), timeout, [self.proc], self.log)

    def wait_for_a_batch(self) -> None:
        wait_until(
            lambda: self.marks.exists() and any(self.marks.iterdir()), "a batch", SPARK_START_S, [self.proc], self.log
        )

    def signal_and_time(self, sig: int, bound_s: float) -> tuple[int, float]:
        """Send ``sig``; the exit status and the seconds it took (fails past ``bound_s`` + slack)."""
        started = time.monotonic()
        self.proc.send_signal(sig)
        return self.exit_within(bound_s, started)

    def exit_within(self, bound_s: float, started: float) -> tuple[int, float]:
        try:
            status = self.proc.wait(bound_s + SLACK)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the driver did not exit within {bound_s} s (+{SLACK} s):\n{self.text()[-3000:]}")
        return status, time.monotonic() - started

    def kill(self) -> None:
        stop_process(self.proc, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_waiting_for_a_missing_tracker_says_so_and_stops_within_2_s(tmp_path: Path, sig: int) -> None:
    port = free_port()  # nothing listens there
    driver = Driver(tmp_path, f"127.0.0.1:{port}")
    try:
        driver.wait_for(f"WARNING sluice.tracker.client.connection: cannot reach the tracker at 127.0.0.1:{port}")
        status, took = driver.signal_and_time(sig, GRACE_S)
    finally:
        driver.kill()
    text = driver.text()
    first = next(line for line in text.splitlines() if "cannot reach the tracker" in line)
    assert first.endswith(
        f"cannot reach the tracker at 127.0.0.1:{port} (connection refused); retrying every 2.0 s at most"
    )
    assert "Traceback" not in text
    assert status == 0, text[-3000:]
    assert took <= GRACE_S + SLACK


def test_a_second_sigterm_mid_batch_exits_3_at_once(tmp_path: Path) -> None:
    tracker = driver_tracker(tmp_path)
    driver = Driver(tmp_path, tracker.address, held=True)
    try:
        driver.wait_for_a_batch()  # a batch is running, held
        driver.proc.send_signal(signal.SIGTERM)
        driver.wait_for("stopping gracefully", timeout=10)
        with pytest.raises(subprocess.TimeoutExpired):
            driver.proc.wait(1.0)  # graceful: the running batch is waited for
        status, took = driver.signal_and_time(signal.SIGTERM, GRACE_S)
    finally:
        driver.kill()
        stop_process(tracker.proc)
    assert status == EXIT_FORCED, driver.text()[-3000:]
    assert took <= GRACE_S + SLACK
    assert "SIGTERM again: batches in progress are abandoned" in driver.text()


def test_mid_batch_a_graceful_stop_waits_for_the_batch_then_exits_0(tmp_path: Path) -> None:
    tracker = driver_tracker(tmp_path)
    driver = Driver(tmp_path, tracker.address, held=True)
    try:
        driver.wait_for_a_batch()
        driver.proc.send_signal(signal.SIGTERM)
        driver.wait_for("stopping gracefully", timeout=10)
        with pytest.raises(subprocess.TimeoutExpired):
            driver.proc.wait(1.0)
        released = time.monotonic()
        driver.hold.unlink()  # the batch ends now; the last one (next tick) is not held
        status, took = driver.exit_within(INTERVAL_MS / 1000 + GRACE_S, released)
    finally:
        driver.kill()
        stop_process(tracker.proc)
    assert status == 0, driver.text()[-3000:]
    assert "streaming driver stopped (graceful)" in driver.text()


def test_a_batch_past_the_stop_timeout_is_abandoned_and_the_driver_exits_3(tmp_path: Path) -> None:
    tracker = driver_tracker(tmp_path)
    driver = Driver(tmp_path, tracker.address, "--stop-timeout-ms", "2000", held=True)
    try:
        driver.wait_for_a_batch()
        status, took = driver.signal_and_time(signal.SIGTERM, 2.0 + GRACE_S)
    finally:
        driver.kill()
        stop_process(tracker.proc)
    assert status == EXIT_FORCED, driver.text()[-3000:]
    assert took >= 2.0  # the batch had its budget
    assert "abandoned by the stop" in driver.text()


def test_a_tracker_outage_is_one_line_recovery_one_line_and_a_stop_is_quick(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    tracker = driver_tracker(tmp_path, port)
    driver = Driver(tmp_path, address)
    try:
        driver.wait_for_a_batch()
        stop_process(tracker.proc, signal.SIGKILL)
        driver.wait_for(f"cannot reach the tracker at {address}", timeout=30)
        driver.wait_for(re.compile(r"batch \d+ could not be created: .*the next tick tries again"), timeout=30)
        assert "Traceback" not in driver.text()
        tracker = driver_tracker(tmp_path, port)  # the same log, the same port
        driver.wait_for(
            re.compile(
                rf"INFO sluice.tracker.client.connection: reached the tracker at {address} after [\d.]+ s, \d+ attempts"
            ),
            timeout=30,
        )
        outage = driver.text().count(f"cannot reach the tracker at {address}")
        stop_process(tracker.proc, signal.SIGKILL)  # a second outage, and a stop during it
        wait_until(
            lambda: driver.text().count(f"cannot reach the tracker at {address}") > outage,
            "the second outage",
            30,
            [driver.proc],
            driver.log,
        )
        status, took = driver.signal_and_time(signal.SIGTERM, INTERVAL_MS / 1000 + GRACE_S)
    finally:
        driver.kill()
        stop_process(tracker.proc)
    assert status == 0, driver.text()[-3000:]
    assert "Traceback" not in driver.text()


def test_stop_from_another_thread_ends_a_start_waiting_for_the_tracker(spark) -> None:
    from sluice.spark_driver.driver import StreamingDriver

    driver = StreamingDriver(spark, tracker=f"127.0.0.1:{free_port()}", batch_interval_ms=INTERVAL_MS)
    driver.foreach_batch(lambda batch: None)
    starting = threading.Thread(target=driver.start, daemon=True)
    starting.start()
    starting.join(1.0)
    assert starting.is_alive()  # waiting for a tracker that is not there
    asked = time.monotonic()
    driver.stop(timeout=GRACE_S)
    starting.join(GRACE_S)
    assert not starting.is_alive() and time.monotonic() - asked <= GRACE_S
    assert driver.state == "stopped" and driver.await_termination(0)
