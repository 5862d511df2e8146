"""The latency target against the throughput one, on the real pipeline, across a capacity step.

A real ``sluice-tracker`` and a saturated generator ``sluice-receiver`` (processes), the driver
with Spark's PID on a given Spark session, 500 ms batches and 100 ms blocks, and a batch function
whose cost per record steps up mid-run (capacity 5,000 records/s, then 3,000): the step counts
batches, not time, so every run sees it at the same batch.  A record's end-to-end latency is the
batch function's end (its output) minus the start of the block that holds it (the receiver's
clock, one machine): the generator makes a record when the receiver's limiter admits it, so that
is when it entered, and a block's start is at most one block interval before any of its records,
so each latency is an upper bound.  ``tests/driver/test_latency_target.py`` and
``bench/latency_target.py`` run it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.demo.backpressure import Recorder, block_start, start_generator_receiver
from sluice.embedded import start_tracker, stop_process
from sluice.spark_driver import StreamingDriver
from sluice.spark_driver.receiver_source import ReceiverSource

INTERVAL_MS = 500
BLOCK_MS = 100
TARGET_MS = 1000  # processing budget (1000 - 500 - 100) x 0.75 = 300 ms
COST_S = 0.0002  # per record before the step: capacity 5,000 records/s
STEP = 5 / 3  # the cost after it: capacity 3,000 records/s
OFFERED = 15_000.0  # records/s the generator would make: the source is saturated throughout
STEP_AT = 10  # batches with records before the step
SETTLE = 8  # batches after the step left out of the figures
WINDOW = 12  # batches the figures are taken over


@dataclass
class LatencyRun:
    """Per batch with records, in order: its records and each of its blocks' (latency ms, records);
    the step after ``step_at`` batches, the figures over ``window_batches`` after ``settle`` more."""

    step_at: int = STEP_AT
    settle: int = SETTLE
    window_batches: int = WINDOW
    batches: list[tuple[int, list[tuple[float, int]]]] = field(default_factory=list)

    def window(self) -> list[tuple[int, list[tuple[float, int]]]]:
        """The batches after the step settled."""
        start = self.step_at + self.settle
        return self.batches[start : start + self.window_batches]

    def figures(self) -> dict[str, float]:
        """Records' latency p50 and p99 (ms) and throughput (records/s) over the window."""
        latencies = sorted(ms for _, blocks in self.window() for ms, n in blocks for _ in range(n))
        records = sum(n for n, _ in self.window())
        return {
            "latency_p50_ms": _percentile(latencies, 0.50),
            "latency_p99_ms": _percentile(latencies, 0.99),
            "throughput": records / (self.window_batches * INTERVAL_MS / 1000),
        }


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def record_latency(
    spark: Any, tmp_path: Path, target: str, run: LatencyRun | None = None, timeout: float = 120
) -> LatencyRun:
    """One run under ``target`` (``throughput`` or ``latency``, at :data:`TARGET_MS`), recorded into
    ``run`` (default: the shape of the module's constants)."""
    store = (tmp_path / "blocks").as_uri()
    tracker = start_tracker(tmp_path / "wal", args=["--no-fsync"], block_store=store)
    recorder = Recorder()
    run = run or LatencyRun()

    def fn(batch: Any) -> None:
        if batch.num_records == 0:
            return
        cost = COST_S if len(run.batches) < run.step_at else COST_S * STEP
        time.sleep(batch.num_records * cost)
        out = time.time() * 1000
        blocks = [(out - (block_start(b.block_id) or batch.time_ms), b.num_records) for b in batch.blocks]
        run.batches.append((batch.num_records, blocks))

    # Sluice's bounded batches (the default): a batch takes queued blocks up to the capacity rate,
    # so what receivers admitted before a cut drains with the capacity the budget holds back.
    driver = StreamingDriver(
        spark,
        source=ReceiverSource(tracker.address, block_store=store),
        batch_interval_ms=INTERVAL_MS,
        block_interval_ms=BLOCK_MS,
        target=target,
        target_latency_ms=TARGET_MS,
    )
    driver.add_listener(recorder)
    driver.foreach_batch(fn).start()
    receiver = start_generator_receiver(tracker.address, store, OFFERED, BLOCK_MS, tmp_path / "receiver.log")
    try:
        done = recorder.wait_for(run.step_at + run.settle + run.window_batches, timeout)
        assert done, f"only {len(recorder.infos)} batches with input; {(tmp_path / 'receiver.log').read_text()[-2000:]}"
    finally:
        driver.stop(graceful=False)
        stop_process(receiver)
        tracker.stop()
    return run
