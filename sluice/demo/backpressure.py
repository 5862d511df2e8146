"""The backpressure experiment: input offered at 3x a known capacity, run on the real pipeline.

A real ``sluice-tracker`` and a generator ``sluice-receiver`` (processes), the driver with an
estimator on a given Spark session, and a batch function costing a fixed time per record, so
capacity is known (1 / cost).  The estimator's rates travel through the tracker to the receiver's
limiter; :func:`record_backpressure` records every completed batch, every rate the driver published
(with its time) and the blocks each batch read.  The test of the rate loop
(``tests/driver/test_backpressure.py``) and the driver benchmark (``bench/driver.py``) both run it.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process
from sluice.errors import InvalidArgument
from sluice.settings import DriverSettings
from sluice.spark_driver import StreamingDriver
from sluice.spark_driver.batch import BatchInfo
from sluice.spark_driver.receiver_source import ReceiverSource

INTERVAL_MS = 1000
COST_S = 0.0002  # per record: capacity 5,000 records/s
CAPACITY = 1 / COST_S
OFFERED = 3 * CAPACITY
BLOCK_MS = 200
SETTLE_BATCHES = 25
WINDOW = 10
DEFAULT_ESTIMATOR = DriverSettings().estimator  # the schema's default (estimator.name)


class Recorder:
    """A listener keeping every completed batch from the first one with records on."""

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
    """Processing, scheduling delay and throughput over the last ``WINDOW`` batches."""
    window = infos[-WINDOW:]
    processing = [_timed(i.processing_delay_ms) for i in window]
    scheduling = [_timed(i.scheduling_delay_ms) for i in window]
    half = WINDOW // 2
    return {
        "processing_median_ms": statistics.median(processing),
        "scheduling_first_half_ms": statistics.mean(scheduling[:half]),
        "scheduling_second_half_ms": statistics.mean(scheduling[half:]),
        "scheduling_max_ms": max(scheduling),
        "throughput": sum(i.num_records for i in window) / (WINDOW * INTERVAL_MS / 1000),
    }


def _timed(delay_ms: int | None) -> int:
    """A completed batch's delay (``on_batch_completed`` hands only batches that started and ended)."""
    if delay_ms is None:
        raise InvalidArgument("settled() takes completed batches; one has no start or end time")
    return delay_ms


@dataclass
class BackpressureRun:
    """One real run, recorded for both the loop's assertions and the arena's calibration.

    ``publishes`` are the rates the driver's rate loop handed to the tracker, each with the wall
    time (ms) it did so; ``blocks`` maps a batch time to the (block start ms, records) of the
    blocks the batch read (block ids carry their interval's start), so the rate the receiver
    really applied can be read off at the block interval's resolution.
    """

    infos: list[BatchInfo]
    publishes: list[tuple[int, float]] = field(default_factory=list)
    blocks: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


def block_start(block_id: str) -> int | None:
    """``input-<stream>-<receiver>-<start ms>[suffix]`` -> the start, ``None`` if not that shape."""
    digits = ""
    for ch in block_id.rsplit("-", 1)[-1]:
        if not ("0" <= ch <= "9"):
            break
        digits += ch
    return int(digits) if digits else None


class _RecordingSource(ReceiverSource):
    """The tracker's source, recording each rate the driver publishes with the wall time (ms)."""

    def __init__(self, tracker: str, publishes: list[tuple[int, float]], **options: Any) -> None:
        super().__init__(tracker, **options)
        self.publishes = publishes

    def publish_rate(self, rate: float, stream_id: int = 0) -> None:
        self.publishes.append((time.time_ns() // 1_000_000, float(rate)))
        super().publish_rate(rate, stream_id)


def start_generator_receiver(tracker: str, store: str, rate: float, block_interval_ms: int, log: Path) -> Any:
    """A ``sluice-receiver`` process on the generator source offering ``rate`` records/s: the
    saturated source of the real-pipeline runs here and in :mod:`sluice.demo.latency_target`."""
    args = receiver_argv(
        tracker,
        source="generator",
        block_store=store,
        block_interval_ms=block_interval_ms,
        receiver_id="gen",
        extra=["--generator-rate", str(rate)],
    )
    return start_service(args, log=log)


def record_backpressure(
    spark: Any,
    tmp_path: Path,
    batches: int = SETTLE_BATCHES + WINDOW,
    timeout: float = 240,
    estimator: str = DEFAULT_ESTIMATOR,
) -> BackpressureRun:
    """The backpressure run, with the published rates and the blocks of each batch recorded."""
    store = (tmp_path / "blocks").as_uri()
    tracker = start_tracker(tmp_path / "wal", args=["--no-fsync"], block_store=store)
    recorder = Recorder()
    run = BackpressureRun(recorder.infos)

    def fn(batch) -> None:
        run.blocks[batch.time_ms] = [(block_start(b.block_id) or 0, b.num_records) for b in batch.blocks]
        time.sleep(batch.num_records * COST_S)  # the fixed cost per record

    # Spark's allocation (every queued block into the next batch), which the arena models: with
    # Sluice's bounded batches the excess of the overloaded start would wait at the tracker instead
    # of queueing as batches at the driver, and the run would no longer be the Spark case.
    source = _RecordingSource(tracker.address, run.publishes, bounded=False, block_store=store)
    # Spark's controller (no slow start): the run is compared with the arena calibrated on Spark's
    # own behaviour, the first batches unbounded until the first estimate.
    driver = StreamingDriver(spark, source=source, batch_interval_ms=INTERVAL_MS, estimator=estimator, slow_start=False)
    driver.add_listener(recorder)
    driver.foreach_batch(fn).start()
    receiver = start_generator_receiver(tracker.address, store, OFFERED, BLOCK_MS, tmp_path / "receiver.log")
    try:
        assert recorder.wait_for(batches, timeout), (
            f"only {len(recorder.infos)} batches with input completed; receiver log: "
            f"{(tmp_path / 'receiver.log').read_text()[-2000:]}"
        )
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        tracker.stop()
    with recorder.cond:
        run.infos = list(recorder.infos)
    return run


def run_backpressure(
    spark: Any,
    tmp_path: Path,
    batches: int = SETTLE_BATCHES + WINDOW,
    timeout: float = 240,
    estimator: str = DEFAULT_ESTIMATOR,
) -> list[BatchInfo]:
    """The backpressure run the test and the benchmark share; returns every completed BatchInfo."""
    return record_backpressure(spark, tmp_path, batches, timeout, estimator).infos
