"""The rate loop works: input offered at 3x capacity settles at capacity without a growing queue.

The batch function costs a fixed time per record, so capacity is known (1 / cost).  A generator
receiver offers three times that; the PID estimator on the driver publishes rates through the
tracker to the receiver's limiter.  After settling, processing time is within 20% of the batch
interval and scheduling delay does not grow (seed 002's fixed point).
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import pytest

from spark_driver import StreamingDriver
from spark_driver.batch import BatchInfo
from tests.driver.conftest import start_tracker
from tests.support import start_service, stop_process

pytestmark = [pytest.mark.spark, pytest.mark.slow]

INTERVAL_MS = 1000
COST_S = 0.0002  # per record: capacity 5,000 records/s
CAPACITY = 1 / COST_S
SETTLE_BATCHES = 25
WINDOW = 10


class Recorder:
    def __init__(self) -> None:
        self.infos: list[BatchInfo] = []
        self.cond = threading.Condition()

    def on_batch_completed(self, info: BatchInfo) -> None:
        with self.cond:
            if not self.infos and info.num_records == 0:
                return  # the receiver is not up yet: count from its first records
            self.infos.append(info)
            self.cond.notify_all()

    def wait_for(self, n: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.infos) >= n, timeout)


def settled(infos: list[BatchInfo]) -> dict[str, float]:
    window = infos[-WINDOW:]
    processing = [i.processing_delay_ms for i in window]
    scheduling = [i.scheduling_delay_ms for i in window]
    half = WINDOW // 2
    return {
        "processing_median_ms": statistics.median(processing),
        "scheduling_first_half_ms": statistics.mean(scheduling[:half]),
        "scheduling_second_half_ms": statistics.mean(scheduling[half:]),
        "scheduling_max_ms": max(scheduling),
        "throughput": sum(i.num_records for i in window) / (WINDOW * INTERVAL_MS / 1000),
    }


def run_backpressure(spark, tmp_path: Path, batches: int = SETTLE_BATCHES + WINDOW,
                     timeout: float = 240) -> list[BatchInfo]:
    """The backpressure run the test and the benchmark share; returns every completed BatchInfo."""
    tracker = start_tracker(tmp_path)
    recorder = Recorder()

    def fn(batch) -> None:
        time.sleep(batch.num_records * COST_S)  # the fixed cost per record

    driver = StreamingDriver(spark, tracker=tracker.address, batch_interval_ms=INTERVAL_MS, estimator="pid")
    driver.add_listener(recorder)
    driver.foreach_batch(fn).start()
    receiver = start_service(
        ["-m", "receiver.cli", "--tracker", tracker.address, "--source", "generator",
         "--generator-rate", str(3 * CAPACITY), "--block-store", (tmp_path / "blocks").as_uri(),
         "--block-interval-ms", "200", "--receiver-id", "gen"], log=tmp_path / "receiver.log")
    try:
        assert recorder.wait_for(batches, timeout), (
            f"only {len(recorder.infos)} batches with input completed; receiver log: "
            f"{(tmp_path / 'receiver.log').read_text()[-2000:]}")
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        stop_process(tracker.proc)
    return list(recorder.infos)


def test_rate_settles_at_capacity(spark, tmp_path: Path) -> None:
    infos = run_backpressure(spark, tmp_path)
    # Input really was more than capacity at first: the loop had something to do.
    assert max(i.num_records for i in infos) > 1.5 * CAPACITY * INTERVAL_MS / 1000
    figures = settled(infos)
    assert 0.8 * INTERVAL_MS <= figures["processing_median_ms"] <= 1.2 * INTERVAL_MS, figures
    # Not growing: the second half of the window waits no longer than the first (plus noise).
    assert figures["scheduling_second_half_ms"] <= figures["scheduling_first_half_ms"] + 200, figures
    assert figures["scheduling_max_ms"] < INTERVAL_MS, figures
