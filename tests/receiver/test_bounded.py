"""Receiver workers bounded from their first record and in their stop, with real processes.

A receiver started before any driver applies ``backpressure.initial_rate``; the tracker keeps the
last published rate in its write-ahead log and hands it to receivers that register, also after a
SIGKILL; offsets are committed only after the tracker's acknowledgement, so a paused tracker stalls
the commits; and SIGTERM ends a worker within ``receiver.stop_timeout_ms`` whatever the tracker
does, abandoning (and never committing) what it has not acknowledged.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sluice.embedded import create_topic, free_port, start_service, stop_process, tracker_argv
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import allocate_all, duplicates, records_of, scrape
from .test_kafka_receiver import committed, produce
from .test_workers import accepted_records, worker

pytestmark = pytest.mark.slow


async def _accepted_rate(address: str, seconds: float) -> float:
    """Records/s the tracker accepted over ``seconds`` (from the first poll after a block landed)."""
    start_count = await accepted_records(address)
    start = time.monotonic()
    await asyncio.sleep(seconds)  # the measurement window itself, not a synchronisation
    return (await accepted_records(address) - start_count) / (time.monotonic() - start)


async def test_a_receiver_alone_ingests_at_the_initial_rate(tracker_process, tmp_path: Path) -> None:
    # The generator offers records as fast as it is allowed (hundreds of thousands a second).
    proc = worker(tmp_path, tracker_process.address, "wi", "--source", "generator", "--initial-rate", "5000")
    try:
        await eventually(
            lambda: accepted_records(tracker_process.address), timeout=30, interval=0.1, message="first block accepted"
        )
        rate = await _accepted_rate(tracker_process.address, 5.0)
    finally:
        assert stop_process(proc) == 0
    # blocks land every 200 ms (1,000 records each): one block more or less over 5 s is 4 %
    assert 4_500 <= rate <= 5_500, rate
    assert "started (rate 5000.0)" in (tmp_path / "wi.log").read_text()


def _rate_limit(port: int, receiver_id: str) -> float | None:
    try:
        return scrape(port, "sluice_receiver_rate_limit", {"receiver": receiver_id})
    except OSError:  # the worker's metrics server is not up yet
        return None


async def test_the_last_published_rate_survives_a_tracker_sigkill_and_reaches_registering_receivers(
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "tracker.log"

    def tracker() -> subprocess.Popen:
        return start_service(
            tracker_argv(f"127.0.0.1:{port}", tmp_path / "wal", block_store=(tmp_path / "blocks").as_uri()),
            port=port,
            log=log,
        )

    address = f"127.0.0.1:{port}"
    first = tracker()
    metrics_a, metrics_b = free_port(), free_port()
    procs = [first]
    try:
        a = worker(
            tmp_path,
            address,
            "wa",
            "--source",
            "generator",
            "--generator-rate",
            "100",
            "--initial-rate",
            "20000",
            "--metrics-port",
            str(metrics_a),
        )
        procs.append(a)
        await eventually(lambda: _rate_limit(metrics_a, "wa-0") == 20_000.0, timeout=30, message="a at 20000")
        async with TrackerClient(address, "driver") as driver:
            await driver.publish_rate(0, 3_000.0)
        await eventually(lambda: _rate_limit(metrics_a, "wa-0") == 3_000.0, timeout=10, message="a at 3000")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        procs.append(tracker())  # same log, same port: a's client reconnects and registers again
        b = worker(
            tmp_path,
            address,
            "wb",
            "--source",
            "generator",
            "--generator-rate",
            "100",
            "--initial-rate",
            "20000",
            "--metrics-port",
            str(metrics_b),
        )
        procs.append(b)
        # b registers with the restarted tracker: it gets its share of the logged 3000 at once,
        # and a is pushed its new share
        await eventually(lambda: _rate_limit(metrics_b, "wb-0") == 1_500.0, timeout=30, message="b at 1500")
        await eventually(lambda: _rate_limit(metrics_a, "wa-0") == 1_500.0, timeout=10, message="a at 1500")
        async with TrackerClient(address, "admin") as admin:
            assert (await admin.status())["rates"] == {0: 3_000.0}
    finally:
        for proc in reversed(procs):
            stop_process(proc)
    assert "started (rate 1500.0)" in (tmp_path / "wb.log").read_text()


def _abandoned(log: Path) -> int:
    match = re.search(r"abandoning (\d+) block\(s\)", log.read_text())
    assert match, log.read_text()[-3000:]
    return int(match.group(1))


@pytest.mark.timing("tolerates 2.5-4 s for a 3 s stop: three busy workers beside it on two cores")
async def test_sigterm_ends_a_worker_within_the_stop_timeout_when_the_tracker_is_gone(
    tracker_process, tmp_path: Path
) -> None:
    proc = worker(
        tmp_path,
        tracker_process.address,
        "wg",
        "--source",
        "generator",
        "--generator-rate",
        "2000",
        "--stop-timeout-ms",
        "3000",
    )
    try:
        await eventually(lambda: accepted_records(tracker_process.address), timeout=30, interval=0.1)
        tracker_process.proc.send_signal(signal.SIGKILL)
        tracker_process.proc.wait(10)
        await asyncio.sleep(0.5)  # the worker cuts and holds blocks nobody acknowledges
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        took = time.monotonic() - started
    finally:
        stop_process(proc, signal.SIGKILL)
    assert code == 3, (tmp_path / "wg.log").read_text()[-3000:]
    assert 2.5 <= took <= 4.0, took  # the graceful part waited, and the whole stop kept to 3 s
    assert _abandoned(tmp_path / "wg.log") >= 1


@pytest.mark.kafka
async def test_a_paused_tracker_stalls_commits_and_a_bounded_stop_loses_nothing(
    kafka_broker, tracker_process, tmp_path: Path
) -> None:
    total, partitions = 30_000, 2
    topic = await create_topic(kafka_broker.bootstrap, partitions)
    await produce(kafka_broker.bootstrap, topic, total, partitions)
    group = f"g-{topic}"
    common = (
        "--source",
        "kafka",
        "--bootstrap-servers",
        kafka_broker.bootstrap,
        "--topic",
        topic,
        "--group-id",
        group,
        "--block-interval-ms",
        "100",
    )

    async def committed_sum() -> int:
        return sum(o or 0 for o in (await committed(kafka_broker.bootstrap, group, topic, partitions)).values())

    first = worker(tmp_path, tracker_process.address, "wk", *common, "--max-rate", "3000", "--stop-timeout-ms", "3000")
    second = None
    try:
        await eventually(
            lambda: _committed_at_least(committed_sum, 3_000), timeout=60, interval=0.2, message="commits under way"
        )
        # Paused: the worker still reads (it has 10 s of records ahead at 3000/s) and cuts blocks,
        # but no acknowledgement comes, so nothing more is committed.
        tracker_process.pause()
        await asyncio.sleep(0.5)  # a commit whose ack left before the pause may still land
        stalled = await committed_sum()
        await asyncio.sleep(2.0)  # 6,000 records' worth of commits would happen here unpaused
        assert await committed_sum() == stalled < total
        tracker_process.resume()
        await eventually(
            lambda: _committed_at_least(committed_sum, stalled + 1),
            timeout=30,
            interval=0.2,
            message="commits resumed after SIGCONT",
        )

        # A stop while the tracker is paused: bounded, and what was not acknowledged is not committed.
        tracker_process.pause()
        await asyncio.sleep(0.5)  # as above: an ack that left before the pause may still commit
        before_stop = await committed_sum()
        started = time.monotonic()
        first.send_signal(signal.SIGTERM)
        code = first.wait(timeout=10)
        took = time.monotonic() - started
        assert code == 3 and took <= 4.0, (code, took, (tmp_path / "wk.log").read_text()[-3000:])
        assert _abandoned(tmp_path / "wk.log") >= 1
        ends = await committed(kafka_broker.bootstrap, group, topic, partitions)
        assert sum(o or 0 for o in ends.values()) == before_stop < total
        # The paused tracker dies before reading the add_block it was sent: what it acknowledged is
        # exactly what its log holds, and no partition was committed past that.
        tracker_process.proc.send_signal(signal.SIGKILL)
        tracker_process.proc.wait(10)
        tracker_process.proc = restart_tracker(tracker_process, tmp_path)
        acknowledged = await allocate_all(tracker_process.address)
        high = {r.partition: r.until_offset for b in acknowledged for r in b.offset_ranges}
        assert all((ends[p] or 0) <= high.get(p, 0) for p in range(partitions)), (ends, high)

        # Nothing lost: the next member of the group reads the abandoned records again.
        second = worker(tmp_path, tracker_process.address, "wk2", *common)
        rest = total - sum(b.num_records for b in acknowledged)
        await eventually(
            lambda: _accepted_at_least(tracker_process.address, rest),
            timeout=90,
            interval=0.5,
            message="every record accepted",
        )
        assert stop_process(second) == 0
    finally:
        tracker_process.resume()
        for proc in (first, second):
            if proc is not None:
                stop_process(proc, signal.SIGKILL)
    records = records_of(acknowledged + await allocate_all(tracker_process.address))
    assert not duplicates([(r.partition, r.offset) for r in records])
    assert sorted(int(r.value) for r in records) == list(range(total))


def restart_tracker(tracker_process, tmp_path: Path) -> subprocess.Popen:
    """The fixture's tracker again, on its log and its ports."""
    port = int(tracker_process.address.rpartition(":")[2])
    return start_service(
        tracker_argv(
            tracker_process.address,
            tmp_path / "wal",
            block_store=(tmp_path / "blocks").as_uri(),
            extra=["--liveness-timeout-ms", "60000", "--metrics-port", str(tracker_process.metrics_port)],
        ),
        port=port,
        log=tracker_process.log,
    )


async def _committed_at_least(committed_sum, count: int) -> bool:
    return await committed_sum() >= count


async def _accepted_at_least(address: str, count: int) -> bool:
    return await accepted_records(address) >= count
