"""A tracker client that cannot reach its tracker: it says so once at WARNING, says when it got
through, and never holds a stop (a close ends ``start()``; ``stop_waiting`` ends calls waiting
out an outage).  Real tracker processes; the rate limit itself is in ``tests/test_retry_log.py``."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest

from sluice.embedded import free_port, start_tracker, stop_process
from sluice.tracker.client.sync_client import SyncTrackerClient
from sluice.tracker.client.tracker_client import TrackerClient, TrackerUnavailable

LOGGER = "sluice.tracker.client.connection"


@pytest.mark.slow
async def test_first_failure_is_one_warning_and_recovery_one_line(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    port = free_port()
    client = TrackerClient(f"127.0.0.1:{port}", "admin", max_backoff=0.2)
    task = asyncio.ensure_future(client.start())
    try:
        for _ in range(100):
            if any("cannot reach" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # several more attempts fail meanwhile, silently
        tracker = await asyncio.to_thread(start_tracker, tmp_path / "wal", port=port)
        try:
            await asyncio.wait_for(task, 30)
        finally:
            await client.close()
            await asyncio.to_thread(stop_process, tracker.proc)
    finally:
        task.cancel()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert lines[0] == (
        "WARNING",
        f"cannot reach the tracker at 127.0.0.1:{port} (connection refused); retrying every 0.2 s at most",
    )
    assert len([m for _, m in lines if "cannot reach" in m]) == 1, lines  # not one per attempt
    level, recovered = lines[-1]
    assert level == "INFO" and recovered.startswith(f"reached the tracker at 127.0.0.1:{port} after "), lines
    attempts = int(recovered.rsplit(", ", 1)[1].split()[0])
    assert attempts > 3, recovered


@pytest.mark.timing("tolerates 2 s for a close that takes milliseconds: another worker busy beside it")
def test_close_ends_a_start_that_waits_for_a_missing_tracker() -> None:
    client = SyncTrackerClient(f"127.0.0.1:{free_port()}", "driver")
    failures: list[BaseException] = []

    def start() -> None:
        try:
            client.start()
        except BaseException as exc:  # noqa: BLE001 - what start raised is the result
            failures.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # still waiting: nothing listens
    closed = time.monotonic()
    client.close()
    thread.join(5)
    assert not thread.is_alive(), "start() still waits after close()"
    assert time.monotonic() - closed < 2.0
    assert len(failures) == 1 and isinstance(failures[0], TrackerUnavailable)
    assert "is closed" in str(failures[0])


@pytest.mark.slow
@pytest.mark.timing("tolerates 1-2 s for what takes milliseconds: another worker busy beside it")
def test_stop_waiting_ends_calls_that_wait_out_an_outage(tmp_path: Path) -> None:
    tracker = start_tracker(tmp_path / "wal")
    client = SyncTrackerClient(tracker.address, "admin", request_timeout=30.0)
    try:
        client.start()
        client.status()
        stop_process(tracker.proc, timeout=10)
        results: list[BaseException] = []

        def status() -> None:
            try:
                client.status()
            except BaseException as exc:  # noqa: BLE001 - what the call raised is the result
                results.append(exc)

        thread = threading.Thread(target=status, daemon=True)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive()  # waits for the tracker to come back, up to request_timeout
        asked = time.monotonic()
        client.stop_waiting()
        thread.join(5)
        assert not thread.is_alive() and time.monotonic() - asked < 2.0
        assert isinstance(results[0], TrackerUnavailable)
        started = time.monotonic()
        with pytest.raises(TrackerUnavailable):
            client.status()  # a later call does not wait either
        assert time.monotonic() - started < 1.0
    finally:
        client.close()
        stop_process(tracker.proc)


@pytest.mark.slow
def test_the_structured_source_link_says_it_cannot_reach_the_tracker(caplog) -> None:
    from sluice.spark_driver.structured.options import sluice_options
    from sluice.spark_driver.structured.source import connect

    caplog.set_level(logging.INFO, logger=LOGGER)
    port = free_port()
    with pytest.raises(TrackerUnavailable, match=f"cannot reach the tracker at 127.0.0.1:{port} within 1.0s"):
        connect(sluice_options({"tracker": f"127.0.0.1:{port}", "requestTimeoutMs": "1000"}))
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelname == "WARNING"]
    assert warnings == [
        f"cannot reach the tracker at 127.0.0.1:{port} (connection refused); retrying every 2.0 s at most"
    ]
