"""Receiver mode's batches with real processes: a backlog drains in bounded batches, in order, once;
blocks leave the store ``tracker.remember_ms`` after their batch.

A ``sluice-tracker`` and a generator ``sluice-receiver`` run as processes; the driver runs on the
test session's Spark.  Generator records are ``"<receiver>:<seq> words"``, numbered from 0, so
order and exactly-once are read off the sequence numbers.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from sluice.embedded import receiver_argv, start_service, stop_process, wait_until
from sluice.spark_driver import StreamingDriver
from sluice.spark_driver.receiver_source import BATCH_HEADROOM
from tests.driver.conftest import driver_tracker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def start_generator(tmp_path: Path, tracker: str, rate: int, total: int = 0) -> subprocess.Popen:
    return start_service(
        receiver_argv(
            tracker,
            source="generator",
            block_store=(tmp_path / "blocks").as_uri(),
            receiver_id="g",
            extra=["--generator-rate", str(rate), "--generator-total", str(total)],
        ),
        log=tmp_path / "receiver.log",
    )


def unallocated(tracker: str) -> int:
    from sluice.tracker.client.sync_client import SyncTrackerClient

    with SyncTrackerClient(tracker, "admin") as client:
        return sum(s["unallocated_records"] for s in client.status()["streams"].values())


def seqs(batch) -> list[int]:
    return batch.rdd.map(lambda record: int(record.split(" ", 1)[0].split(":")[1])).collect()


def test_a_driver_started_after_a_backlog_drains_it_in_bounded_batches_in_order_exactly_once(spark, tmp_path: Path):
    offered, total, rate = 6_000, 80_000, 10_000
    tracker = driver_tracker(tmp_path)
    receiver = start_generator(tmp_path, tracker.address, offered, total)
    batches: list[list[int]] = []
    done = threading.Event()

    def fn(batch) -> None:
        batches.append(seqs(batch))
        if sum(map(len, batches)) >= total:
            done.set()

    driver = None
    try:
        # six bounded batches' worth of records (10 s of them) pile up before any driver exists
        wait_until(
            lambda: unallocated(tracker.address) >= 6 * rate,
            "a backlog of six batches",
            90,
            [receiver],
            tmp_path / "receiver.log",
        )
        driver = StreamingDriver(
            spark,
            tracker=tracker.address,
            batch_interval_ms=1000,
            estimator="constant",
            estimator_options={"rate": rate},
            initial_rate=rate,
        )
        driver.foreach_batch(fn).start()
        assert done.wait(120), f"{sum(map(len, batches))} of {total} records processed"
    finally:
        if driver is not None:
            driver.stop(graceful=False)
        stop_process(receiver)
        stop_process(tracker.proc)
    bound = rate * 1.0 * (1 + BATCH_HEADROOM)
    sizes = [len(b) for b in batches]
    assert max(sizes) <= bound, sizes  # no batch took the backlog whole
    assert sum(size > 0.8 * bound for size in sizes) >= 5, sizes  # it drained over several full batches
    flat = [seq for batch in batches for seq in batch]
    assert flat == list(range(total))  # in order, every record exactly once


def test_blocks_leave_the_store_after_remember_ms(spark, tmp_path: Path) -> None:
    remember_ms, interval_ms = 3_000, 500
    tracker = driver_tracker(tmp_path, remember_ms=remember_ms)
    receiver = start_generator(tmp_path, tracker.address, 1_000)
    batches: dict[int, list[Path]] = {}

    def fn(batch) -> None:
        batches[batch.time_ms] = [Path(b.location.removeprefix("file://")) for b in batch.blocks]
        assert all(path.exists() for path in batches[batch.time_ms])

    driver = StreamingDriver(spark, tracker=tracker.address, batch_interval_ms=interval_ms, backpressure=False)
    driver.foreach_batch(fn).start()
    try:
        wait_until(
            lambda: len([t for t, blocks in batches.items() if blocks]) >= 14,
            "14 batches with blocks",
            60,
            [receiver],
            tmp_path / "receiver.log",
        )
    finally:
        driver.stop(graceful=True)
        stop_process(receiver)
        stop_process(tracker.proc)
    last = max(batches)  # completed last: its completion cleaned up the batches before last - remember
    old = [path for t, paths in batches.items() if t < last - remember_ms for path in paths]
    recent = [path for t, paths in batches.items() if t >= last - remember_ms for path in paths]
    assert old and recent
    assert not [path for path in old if path.exists()], "blocks older than remember_ms are still in the store"
    assert all(path.exists() for path in recent), "blocks inside the remember window were deleted"
